#!/usr/bin/env node
// OpenClaw-dialect envelope vectors made by the REAL OpenClaw channel plugin's own crypto code
// (npm @stagewhisper/stagewhisper, its bundled `src/crypto.ts`), with non-ASCII envelope fields.
//
//   node tests/byo/gen_vectors.mjs [--plugin <plugin dir>] [--seal-bin <byo_seal example>]
//                                  [--out tests/fixtures/byo/openclaw-nonascii.json]
//
// The plugin's bundle exports only its plugin object, so this script imports the installed
// bundle through a module load hook that appends one `export` line naming its crypto module
// (`crypto_exports`, `init_crypto`, `buildAad`) to the source text in memory. Nothing of the
// plugin is copied anywhere. Then:
//   1. keys: the plugin's `IdentityKeypair` from pinned secrets, its `deriveEnvelopeKey`;
//   2. `plugin_sealed`: the plugin's `seal()` (sender_role "plugin") with non-ASCII session,
//      correlation and content-type fields and plaintexts; the exact AAD its `buildAad` made and
//      the envelope text as it puts it on the wire (`JSON.stringify(envelope)`);
//   3. `desktop_sealed`: the desktop's own seal (the `byo_seal` example of stagewhisper-core,
//      built here with cargo unless --seal-bin is given) of non-ASCII metadata and plaintexts,
//      opened by the plugin's `open()`: what it got back is recorded.
// The Rust test `byo::crypto::tests::openclaw_nonascii` reads the output.
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { registerHooks } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "..", "..");
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const pluginDir = resolve(opt("--plugin", join(REPO, ".peers/openclaw-template/extensions/stagewhisper")));
const outPath = resolve(opt("--out", join(REPO, "tests/fixtures/byo/openclaw-nonascii.json")));
const pkg = JSON.parse(readFileSync(join(pluginDir, "package.json"), "utf8"));
const bundle = join(pluginDir, "dist", "index.js");
const bundleUrl = pathToFileURL(bundle).href;

registerHooks({
  load(url, context, nextLoad) {
    const r = nextLoad(url, context);
    if (url !== bundleUrl) return r;
    const src = typeof r.source === "string" ? r.source : Buffer.from(r.source).toString("utf8");
    return { ...r, source: `${src}\nexport { crypto_exports as __swCrypto, init_crypto as __swInit, buildAad as __swAad };\n` };
  },
});
const mod = await import(bundleUrl);
mod.__swInit();
const C = mod.__swCrypto;
const b64 = (u8) => Buffer.from(u8).toString("base64");
const hex = (u8) => Buffer.from(u8).toString("hex");
const sha = (label) => new Uint8Array(createHash("sha256").update(label).digest());

// 1. keys
const desktop = C.IdentityKeypair.fromSecretBytes(sha("stagewhisper-nonascii-desktop"));
const plugin = C.IdentityKeypair.fromSecretBytes(sha("stagewhisper-nonascii-plugin"));
const key = plugin.deriveEnvelopeKey(desktop.publicKey);
if (hex(key) !== hex(desktop.deriveEnvelopeKey(plugin.publicKey))) throw new Error("keys differ");
const keypair = (k, label) => ({
  secret_b64: b64(k.secretBytes()), public_b64: k.publicKeyBase64(),
  secret_derivation: `SHA-256(${JSON.stringify(label)})`,
});

// 2. the plugin seals non-ASCII fields
const CASES = [
  ["accents", "réunion-café-Zürich-ñ", "corr-àéîõü", "application/json; charset=été"],
  ["cjk", "会議-東京-통화", "相関-번호", "テキスト/json"],
  ["emoji_astral", "call-🎉-👩🏽‍💻", "corr-😀", "application/json"],
  ["line_separators", "a\u2028b\u2029c", "x\u0085y", "application/json"],
  ["del_and_c1", "del\u007f-c1\u0080\u009f", "nbsp\u00a0soft\u00adhyphen", "application/json"],
  ["controls_quotes_backslash", "tab\tnl\ncr\r\"q\"\\b\u0001\u001f", "bs\b ff\f", "text/plain"],
  ["bom_zwj_combining", "\ufeffbom-e\u0301-zw\u200dj", "\ufffd-\uffff", "application/json"],
  ["lone_high_surrogate", "lone-\ud83d-high", "corr", "application/json"],
  ["lone_low_surrogate", "lone-\ude00-low", "corr", "application/json"],
];
const PLAINTEXT = {
  text: "Café con leche à Zürich — 東京の会議 🎉👩🏽‍💻 «ok» \u2028 \u2029 \"q\" \\ \u0000",
  n: 1,
};
const plugin_sealed = CASES.map(([name, sessionId, correlationId, contentType]) => {
  const env = C.sealJson(key, "plugin", sessionId, correlationId, contentType, { case: name, ...PLAINTEXT });
  const wire = JSON.stringify(env);
  const lone = /surrogate/.test(name);
  const opened = new TextDecoder().decode(C.open(key, JSON.parse(wire)));
  // A lone surrogate is no Unicode scalar: JSON readers other than JavaScript's (serde_json, so
  // the Rust test reading this file) refuse it, so such fields are given as their JSON text.
  const fields = lone
    ? { session_id_json: JSON.stringify(sessionId), correlation_id_json: JSON.stringify(correlationId) }
    : { session_id: sessionId, correlation_id: correlationId };
  return {
    name, sender_role: "plugin", ...fields, content_type: contentType,
    aad_hex: hex(mod.__swAad(env)), envelope_json: wire, plaintext_utf8: opened,
    // The desktop refuses such an envelope as bad_envelope (it is not valid JSON text to it).
    expect: lone ? "refused:bad_envelope" : "opens",
  };
});

// 3. the desktop seals, the plugin opens
const DESKTOP_CASES = [
  { name: "ascii_meta_nonascii_plaintext", session_id: "insights:3f1c2d4e-0000-4000-8000-000000000001",
    correlation_id: "job-1", content_type: "application/json",
    plaintext: JSON.stringify({ text: PLAINTEXT.text, jp: "東京", emoji: "🎉" }) },
  { name: "nonascii_meta_percent_encoded", session_id: "réunion-東京-🎉", correlation_id: "corr-\u2028",
    content_type: "application/json", plaintext: "plain: café 👩🏽‍💻" },
  { name: "percent_sign_itself", session_id: "100%-sure", correlation_id: "c", content_type: "text/plain",
    plaintext: "%41" },
];
let sealBin = opt("--seal-bin", "");
if (!sealBin) {
  execFileSync("cargo", ["build", "--quiet", "-p", "stagewhisper-core", "--example", "byo_seal"],
    { cwd: REPO, stdio: "inherit" });
  sealBin = join(process.env.CARGO_TARGET_DIR || join(REPO, "target"), "debug", "examples", "byo_seal");
}
const sealed = JSON.parse(execFileSync(sealBin, [], {
  input: JSON.stringify({ key_b64: b64(key), items: DESKTOP_CASES }), encoding: "utf8",
}));
const desktop_sealed = DESKTOP_CASES.map((c, i) => {
  const wire = sealed[i];
  const env = JSON.parse(wire);
  let opened;
  try {
    opened = { plaintext_utf8: new TextDecoder("utf-8", { fatal: true }).decode(C.open(key, env)) };
  } catch (e) {
    opened = { plugin_error: String(e && e.message) };
  }
  if (opened.plaintext_utf8 !== c.plaintext) throw new Error(`${c.name}: the plugin did not open the desktop's seal: ${JSON.stringify(opened)}`);
  return { ...c, envelope_json: wire, aad_hex_by_plugin: hex(mod.__swAad(env)), ...opened };
});

const out = {
  title: "OpenClaw-dialect (JSON.stringify) AAD with non-ASCII envelope fields",
  generated_by: `${pkg.name}@${pkg.version}'s own code (its bundled crypto module) with tests/byo/gen_vectors.mjs, node ${process.version}`,
  keypairs: { desktop: keypair(desktop, "stagewhisper-nonascii-desktop"), plugin: keypair(plugin, "stagewhisper-nonascii-plugin") },
  envelope_key_b64: b64(key),
  plugin_sealed,
  desktop_sealed,
};
if (!existsSync(dirname(outPath))) mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, JSON.stringify(out, null, 2) + "\n");
console.log(`wrote ${plugin_sealed.length} plugin-sealed and ${desktop_sealed.length} desktop-sealed vectors to ${outPath}`);
