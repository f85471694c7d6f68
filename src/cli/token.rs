//! `ankusa token`: make bearer tokens and their digests for `[[api.tokens]]`.
//!
//! The config keeps only a token's SHA-256 digest, so that a leaked config file grants
//! nothing. `token new` prints a fresh token (give it to the caller) and its digest (put it
//! in the config); `token hash` digests a token read from stdin, so it never appears in
//! the shell's history or the process list.

use std::io::{Read, Write};

use anyhow::Context as _;

use crate::api::auth::{digest_hex, new_token};

/// The longest token `token hash` reads.
const MAX_TOKEN_LEN: usize = 512;

/// What `ankusa token` does.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Print a fresh random token and its SHA-256 digest.
    New,
    /// Read a token from stdin and print its SHA-256 digest (hex).
    Hash,
}

/// Run `ankusa token <command>`, writing to `out`.
pub fn run(command: TokenCommand, input: &mut dyn Read, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        TokenCommand::New => {
            let token = new_token();
            writeln!(out, "token:  {token}")?;
            writeln!(out, "sha256: {}", digest_hex(&token))?;
        }
        TokenCommand::Hash => {
            let mut text = String::new();
            input
                .take(MAX_TOKEN_LEN as u64 + 2)
                .read_to_string(&mut text)
                .context("reading the token from stdin")?;
            // One trailing newline (from `echo` or a file) is not part of the token.
            let token = text
                .strip_suffix('\n')
                .map(|t| t.strip_suffix('\r').unwrap_or(t))
                .unwrap_or(&text);
            if token.is_empty()
                || token.len() > MAX_TOKEN_LEN
                || token.contains(char::is_whitespace)
            {
                anyhow::bail!(
                    "stdin must hold one token of 1 to {MAX_TOKEN_LEN} bytes, without spaces"
                );
            }
            writeln!(out, "{}", digest_hex(token))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_digests_stdin_without_its_newline() {
        let mut out = Vec::new();
        run(TokenCommand::Hash, &mut &b"test\n"[..], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"
        );
        assert!(run(TokenCommand::Hash, &mut &b"\n"[..], &mut Vec::new()).is_err());
        assert!(run(TokenCommand::Hash, &mut &b"a b\n"[..], &mut Vec::new()).is_err());
    }

    #[test]
    fn new_prints_a_token_and_its_digest() {
        let mut out = Vec::new();
        run(TokenCommand::New, &mut &b""[..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let token = text
            .lines()
            .next()
            .unwrap()
            .strip_prefix("token:  ")
            .unwrap();
        let digest = text
            .lines()
            .nth(1)
            .unwrap()
            .strip_prefix("sha256: ")
            .unwrap();
        assert_eq!(digest, digest_hex(token));
    }
}
