//! The console at `/console/`: its HTTP rules (sessions, CSRF, scopes, headers, off) with a
//! plain client, and its pages in a real browser.

mod browser;
mod http;
mod pages;
