// Verify: checks a row's inclusion proof and its checkpoint's signature in the browser
// (WebCrypto: SHA-256 and Ed25519), against the verifier key the operator pinned here. It
// trusts nothing the node says about itself: the page only supplies the bytes to check.
"use strict";

const PIN = "ankusa.console.pinned_key";
const enc = new TextEncoder();

function b64(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

function same(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
}

// RFC 9162 2.1.3.2: the root an audit path leads to from leaf `index` of `size`.
async function rootFrom(leaf, index, size, path) {
  let fn = BigInt(index), sn = BigInt(size) - 1n, r = leaf;
  for (const p of path) {
    if (sn === 0n) throw new Error("the audit path is longer than the tree allows");
    if ((fn & 1n) === 1n || fn === sn) {
      r = await sha256(concat([1], p, r));
      if ((fn & 1n) === 0n) {
        while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
      }
    } else {
      r = await sha256(concat([1], r, p));
    }
    fn >>= 1n; sn >>= 1n;
  }
  if (sn !== 0n) throw new Error("the audit path is shorter than the tree needs");
  return r;
}

// A verifier key in the signed-note text form: `<name>+<hash>+<base64(0x01 || key)>`.
async function parseKey(text) {
  // The name and the hash hold no `+`; the base64 key may.
  const t = text.trim();
  const i = t.indexOf("+");
  const j = t.indexOf("+", i + 1);
  if (i <= 0 || j < 0) throw new Error("the pinned key is not a verifier key (name+hash+key)");
  const [name, hash, key] = [t.slice(0, i), t.slice(i + 1, j), t.slice(j + 1)];
  const raw = b64(key);
  if (raw.length !== 33 || raw[0] !== 1) throw new Error("the pinned key is not an Ed25519 verifier key");
  const id = (await sha256(concat(enc.encode(name + "\n"), raw))).slice(0, 4);
  const hex = Array.from(id, (b) => b.toString(16).padStart(2, "0")).join("");
  if (hex !== hash.toLowerCase()) throw new Error("the pinned key's hash does not match its key");
  const publicKey = await crypto.subtle.importKey("raw", raw.slice(1), { name: "Ed25519" }, false, ["verify"]);
  return { name, id, publicKey };
}

// A signed note: its text, and the signature lines after the blank line.
function parseNote(note) {
  const split = note.indexOf("\n\n");
  if (split < 0) throw new Error("the checkpoint is not a signed note");
  const text = note.slice(0, split + 1);
  const signatures = note.slice(split + 2).split("\n").filter((l) => l.length > 0).map((line) => {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m) throw new Error("a checkpoint signature line is malformed");
    const bytes = b64(m[2]);
    return { name: m[1], id: bytes.slice(0, 4), sig: bytes.slice(4) };
  });
  const [origin, size, root] = text.split("\n");
  return { text, origin, size, root, signatures };
}

// JSON values equal, a missing field counting as null.
function equal(a, b) {
  if (a === undefined) a = null;
  if (b === undefined) b = null;
  if (a === null || b === null || typeof a !== "object" || typeof b !== "object") return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) if (!equal(a[k], b[k])) return false;
  return true;
}

function u64(bytes, at) {
  let v = 0n;
  for (let i = 0; i < 8; i++) v = (v << 8n) | BigInt(bytes[at + i]);
  return v;
}

async function verify(data, pinned) {
  const key = await parseKey(pinned);
  const { row, proof, checkpoint } = data;
  const note = parseNote(checkpoint.checkpoint);
  const line = note.signatures.find((s) => s.name === key.name && same(s.id, key.id));
  if (!line) throw new Error("the checkpoint carries no signature by the pinned key");
  const signed = await crypto.subtle.verify({ name: "Ed25519" }, key.publicKey, line.sig, enc.encode(note.text));
  if (!signed) throw new Error("the checkpoint's signature does not verify with the pinned key");
  if (BigInt(note.size) !== BigInt(proof.size)) throw new Error("the proof is for another tree size than the checkpoint's");
  // The leaf: the row's key (`a`, seq, commit time) and value as stored.
  const input = b64(proof.leaf_input);
  if (input.length < 17 || input[0] !== 0x61) throw new Error("the leaf is not a row");
  if (u64(input, 1) !== BigInt(row.seq) || u64(input, 9) !== BigInt(row.at)) {
    throw new Error("the leaf is another row's");
  }
  let stored;
  try { stored = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(input.slice(17))); }
  catch { throw new Error("the leaf's value is not a row's JSON"); }
  if (!equal(stored, row)) throw new Error("the leaf's row differs from the row shown");
  const leaf = await sha256(concat([0], input));
  const root = await rootFrom(leaf, proof.index, proof.size, proof.proof.map(b64));
  if (!same(root, b64(note.root))) throw new Error("the proof does not lead to the checkpoint's root");
  return `Proved: row ${row.seq}, as shown, is leaf ${proof.index} of the ${note.size}-row tree ` +
    `${note.origin}, whose root ${note.root} is signed by the pinned key ${key.name}.`;
}

function start() {
  const button = document.getElementById("verify");
  const input = document.getElementById("pinned-key");
  const out = document.getElementById("verify-result");
  const data = document.getElementById("proof-data");
  if (!button || !input || !out || !data) return;
  // What the operator already typed wins over the pin kept from last time.
  if (!input.value) input.value = localStorage.getItem(PIN) || "";
  button.hidden = false;
  button.addEventListener("click", async () => {
    out.className = "";
    out.textContent = "Verifying…";
    try {
      const message = await verify(JSON.parse(data.textContent), input.value);
      localStorage.setItem(PIN, input.value.trim());
      out.className = "proved";
      out.textContent = message;
    } catch (e) {
      out.className = "failed";
      out.textContent = "Not proved: " + e.message + ".";
    }
  });
}

document.addEventListener("DOMContentLoaded", start);
