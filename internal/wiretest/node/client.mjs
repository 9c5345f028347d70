// A client of jetsaga wire format v1, written from docs/wire.md alone with
// the official nats package. Every name it uses (headers, prefix, kinds,
// consumer, metadata keys, reasons, the type property), every subject and
// stream name (from the document's templates), the key derivation, the
// duplicate-detection headers and error codes, and the settle replies are
// read from the document at run time; the test vectors are checked
// against this file's own encodings before anything is sent.
//
//   node client.mjs <docs/wire.md> <nats URL> <queues JSON>
//
// <queues JSON> names the queues the Go side created:
// {"auth": ..., "events": ..., "poison": ..., "probe": ...}.
// It plays the twofactor saga (see internal/wiretest) and prints one JSON
// summary on stdout; what it does goes to stderr. It exits 0 when it could
// print the summary (the Go test judges it), 2 on a usage or document
// error, 3 when the overall timeout struck.

import { connect, headers as natsHeaders } from "nats";
import { createHash, randomInt } from "node:crypto";
import { readFileSync } from "node:fs";

const OVERALL_MS = 150_000; // the whole run; a hang fails rather than blocks
const STEP_MS = 20_000; // one awaited event or dead letter

const log = (...a) => console.error("[node]", ...a);
const enc = new TextEncoder();
const dec = new TextDecoder();

const overall = setTimeout(() => {
  log(`overall timeout: ${OVERALL_MS} ms`);
  process.exit(3);
}, OVERALL_MS);

// ---------------------------------------------------------------------------
// The document.

class DocError extends Error {}

function sections(text) {
  const out = new Map();
  let name = "";
  for (const line of text.split("\n")) {
    const m = /^## (.+)$/.exec(line);
    if (m) {
      name = m[1];
      out.set(name, []);
    } else if (name) {
      out.get(name).push(line);
    }
  }
  return out;
}

function section(secs, name) {
  const s = secs.get(name);
  if (!s) throw new DocError(`no section "## ${name}"`);
  return s;
}

// prose joins a section's lines into one string with single spaces.
const prose = (lines) => lines.join(" ").replace(/\s+/g, " ");

function grab(text, re, what) {
  const m = re.exec(text);
  if (!m) throw new DocError(`cannot find ${what} (${re})`);
  return m;
}

// codeBlocks returns the lines of each fenced block of a section.
function codeBlocks(lines) {
  const blocks = [];
  let cur = null;
  for (const l of lines) {
    if (/^\s*```/.test(l)) {
      if (cur) {
        blocks.push(cur);
        cur = null;
      } else cur = [];
    } else if (cur) cur.push(l.trim());
  }
  return blocks;
}

// tableRows returns a section's table rows (after header and separator)
// as arrays of cells.
function tableRows(lines) {
  const rows = lines.filter((l) => l.startsWith("|")).slice(2);
  return rows.map((l) => l.slice(1, -1).split("|").map((c) => c.trim()));
}

const unquote = (cell) => {
  const m = /^`([^`]*)`$/.exec(cell);
  if (!m) throw new DocError(`cell ${cell} is not one code span`);
  return m[1];
};

function readDoc(path) {
  const text = readFileSync(path, "utf8");
  const secs = sections(text);

  // Names: exact text between backticks.
  const names = {};
  for (const l of section(secs, "Names").filter((l) => l.startsWith("| `"))) {
    const m = /^\| `([^`]+)` \| `([^`]*)` \|/.exec(l);
    if (!m) throw new DocError(`Names row not understood: ${l}`);
    names[m[1]] = m[2];
  }
  const name = (c) => {
    if (!(c in names)) throw new DocError(`no row for ${c} in the Names table`);
    return names[c];
  };

  // Test vectors: raw rows, exact text between backticks.
  const vectors = [];
  for (const l of section(secs, "Test vectors").filter((l) => l.startsWith("|")).slice(2)) {
    const m = /^\| ([^|`]+?) \| `([^`]*)` \| `([^`]*)` \|$/.exec(l);
    if (!m) throw new DocError(`Test vectors row not understood: ${l}`);
    vectors.push({ fn: m[1], input: m[2], output: m[3] });
  }

  // Encodings (Conventions).
  const conv = prose(section(secs, "Conventions"));
  const tok = grab(conv, /\*\*token\(x\)\*\*: `(.)` followed by the unpadded base64url encoding \(RFC 4648 §5, alphabet `A-Z a-z 0-9 - _`, no `=`\) of x's UTF-8 bytes/, "the token(x) rule");
  const key = grab(conv, /\*\*key\(MessageID\)\*\*: `(.)` followed by the unpadded base64url encoding of the first (\d+) bytes of the SHA-(\d+) digest of the MessageID's UTF-8 bytes: always (\d+) characters/, "the key(MessageID) rule");

  // Sending to a queue: partitions metadata stream, subject templates.
  const sendLines = section(secs, "Sending to a queue");
  const send = prose(sendLines);
  const infoStream = grab(send, /metadata key `([^`]+)` of stream `([^`]+)`/, "the stream whose metadata gives the partitions")[2];
  const templates = {};
  for (const l of codeBlocks(sendLines)[0] ?? []) {
    const m = /^(\S+)\s{2,}(.+)$/.exec(l);
    if (m) templates[m[2]] = m[1];
  }
  const tmpl = (k) => {
    if (!templates[k]) throw new DocError(`no subject template "${k}" in Sending to a queue`);
    return templates[k];
  };
  const keyAlphabet = grab(send, /otherwise a fresh random token of (\d+)–(\d+) characters of `A-Z a-z 0-9`/, "the random key rule");
  const fnvRule = grab(send, /with a MessageID, FNV-1a 64 of the MessageID's bytes, modulo the number of partitions/, "the MessageID partition rule");
  void fnvRule;

  // Duplicate detection: the two headers and the error codes.
  const dupLines = section(secs, "Duplicate detection");
  const dupHeaders = [];
  for (const l of codeBlocks(dupLines)[0] ?? []) {
    const m = /^([A-Za-z-]+): (.+)$/.exec(l);
    if (!m) throw new DocError(`duplicate-detection header not understood: ${l}`);
    dupHeaders.push([m[1], m[2]]);
  }
  if (dupHeaders.length === 0) throw new DocError("no duplicate-detection headers");
  const dupCodes = [...prose(dupLines).matchAll(/\*\*(\d+)\*\*/g)].map((m) => Number(m[1]));
  if (dupCodes.length === 0) throw new DocError("no duplicate error codes");

  // Receiving and settling.
  const recvLines = section(secs, "Receiving and settling");
  const recv = prose(recvLines);
  const [, recvConsumer, recvStream] = grab(recv, /durable pull consumer `([^`]+)` on stream `([^`]+)`/, "the receive consumer and stream");
  const deliverySubject = grab(recv, /A delivery's subject is `([^`]+)`/, "the delivery subject")[1];
  const ackTemplate = grab(recv, /field of its reply subject \(`([^`]+)`\)/, "the reply subject template")[1];
  const settle = {};
  for (const row of tableRows(recvLines)) {
    const m = /^`([^`]+)`/.exec(row[1] ?? "");
    if (m) settle[row[0]] = m[1];
  }
  for (const k of ["complete", "abandon"]) {
    if (!settle[k]) throw new DocError(`no reply for "${k}" in the settle table`);
  }

  // Dead letters.
  const dl = prose(section(secs, "Dead letters"));
  const [, dlStream, dlSubject] = grab(dl, /dead-letter queue is the stream `([^`]+)`, subject `([^`]+)`/, "the dead-letter stream and subject");

  // What the server refuses: every subject it names, but those it says
  // are refused only on a queue with sessions (ours have none).
  const refuse = prose(section(secs, "What the server refuses"));
  const wrong = [];
  for (const m of refuse.matchAll(/`(P\.[^`]+)`( on a queue with sessions)?/g)) {
    if (!m[2] && !wrong.includes(m[1])) wrong.push(m[1]);
  }
  if (wrong.length === 0) throw new DocError("no refused subjects in What the server refuses");

  // Saga messages: the type property's header.
  const saga = prose(section(secs, "Saga messages"));
  const typeHeader = grab(saga, /with the property `([^`]+)` \(header `([^`]+)`\)/, "the type property's header");

  const n = {
    prefix: name("DefaultPrefix"),
    hMessageID: name("HeaderMessageID"),
    hContentType: name("HeaderContentType"),
    hCorrelationID: name("HeaderCorrelationID"),
    hProp: name("HeaderPropertyPrefix"),
    hDLReason: name("HeaderDeadLetterReason"),
    hDLDescription: name("HeaderDeadLetterDescription"),
    hDLSource: name("HeaderDeadLetterSource"),
    hDLSeq: name("HeaderDeadLetterSeq"),
    escape: name("EscapePrefix"),
    kindWithID: name("KindWithID"),
    kindWithoutID: name("KindWithoutID"),
    consumer: name("ReceiveConsumer"),
    metaPartitions: name("MetaPartitions"),
    metaRequiresSession: name("MetaRequiresSession"),
    metaConfig: name("MetaConfig"),
    reasonMaxDelivery: name("ReasonMaxDeliveryCountExceeded"),
    typeProperty: name("saga.TypeProperty"),
    reasonUnknown: name("saga.ReasonUnknownType"),
    reasonMalformed: name("saga.ReasonMalformed"),
  };
  // The document must agree with itself where it names a thing twice.
  const agree = (what, a, b) => {
    if (a !== b) throw new DocError(`${what}: ${JSON.stringify(a)} here, ${JSON.stringify(b)} there`);
  };
  agree("the receive consumer (Receiving and settling vs Names)", recvConsumer, n.consumer);
  agree("the type property (Saga messages vs Names)", typeHeader[1], n.typeProperty);
  agree("the type property's header (Saga messages vs Names)", typeHeader[2], n.hProp + n.typeProperty);
  agree("the kind token of a send with a MessageID", tmpl("with a MessageID, no session").split(".")[5], n.kindWithID);
  agree("the kind token of a send without a MessageID", tmpl("without a MessageID, no session").split(".")[5], n.kindWithoutID);
  if (!ackTemplate.split(".").includes(n.consumer)) {
    throw new DocError(`the reply subject template ${ackTemplate} does not name the consumer ${n.consumer}`);
  }

  return {
    names: n,
    vectors,
    tokenPrefix: tok[1],
    key: { prefix: key[1], bytes: Number(key[2]), sha: `sha${key[3]}`, length: Number(key[4]) },
    randomKey: { min: Number(keyAlphabet[1]), max: Number(keyAlphabet[2]) },
    infoStream,
    withID: tmpl("with a MessageID, no session"),
    withoutID: tmpl("without a MessageID, no session"),
    sessionWithID: tmpl("with a MessageID, in session SessionID"),
    dupHeaders,
    dupCodes,
    recvStream,
    deliverySubject,
    ackTemplate,
    settle,
    dlStream,
    dlSubject,
    wrong,
  };
}

// ---------------------------------------------------------------------------
// Encodings, this file's own, checked against the document's vectors.

const b64url = (bytes) => Buffer.from(bytes).toString("base64url"); // unpadded

function makeCodec(doc) {
  const token = (x) => doc.tokenPrefix + b64url(enc.encode(x));
  const key = (id) => doc.key.prefix + b64url(createHash(doc.key.sha).update(enc.encode(id)).digest().subarray(0, doc.key.bytes));
  const fnv1a64 = (s) => {
    let h = 0xcbf29ce484222325n;
    for (const b of enc.encode(s)) {
      h ^= BigInt(b);
      h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
    }
    return h;
  };
  const fnvMod = (s, n) => Number(fnv1a64(s) % BigInt(n));
  const topicValue = (v) => (enc.encode(v).length <= 48 ? token(v) : "~" + b64url(createHash("sha256").update(enc.encode(v)).digest().subarray(0, 18)));
  const esc = doc.names.escape;
  const escape = (v) => (v !== "" && (v !== v.trim() || v.startsWith(esc)) ? esc + b64url(enc.encode(v)) : v);
  const unescape = (v) => (v.startsWith(esc) ? dec.decode(Buffer.from(v.slice(esc.length), "base64url")) : v);
  return { token, key, fnvMod, topicValue, escape, unescape };
}

function checkVectors(doc, c) {
  const failures = [];
  const seen = new Set();
  for (const v of doc.vectors) {
    let got;
    let fn = v.fn;
    const mod = /^fnv1a64 mod (\d+)$/.exec(fn);
    if (fn === "key") {
      got = c.key(v.input);
      if (got.length !== doc.key.length) failures.push(`key(${JSON.stringify(v.input)}) has ${got.length} characters, the document says always ${doc.key.length}`);
    } else if (fn === "token") got = c.token(v.input);
    else if (mod) {
      got = String(c.fnvMod(v.input, Number(mod[1])));
      fn = "fnv1a64 mod";
    } else if (fn === "topic value") got = c.topicValue(v.input);
    else if (fn === "escape") {
      got = c.escape(v.input);
      if (c.unescape(v.output) !== v.input) failures.push(`unescape(${JSON.stringify(v.output)}) is not ${JSON.stringify(v.input)}`);
    } else {
      failures.push(`unknown test vector function ${JSON.stringify(v.fn)}`);
      continue;
    }
    seen.add(fn);
    if (got !== v.output) failures.push(`${v.fn}(${JSON.stringify(v.input)}): got ${JSON.stringify(got)}, the document says ${JSON.stringify(v.output)}`);
  }
  for (const fn of ["key", "token", "fnv1a64 mod", "topic value", "escape"]) {
    if (!seen.has(fn)) failures.push(`no test vector for ${fn}`);
  }
  return failures;
}

// ---------------------------------------------------------------------------
// The client.

// fill replaces the placeholder tokens of a subject or stream template
// (split on sep) with vars.
function fill(template, vars, sep = ".") {
  return template
    .split(sep)
    .map((t) => (t in vars ? vars[t] : t))
    .join(sep);
}

const randomKey = (min, max) => {
  const abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const n = Math.min(max, Math.max(min, 22));
  let s = "";
  for (let i = 0; i < n; i++) s += abc[randomInt(abc.length)];
  return s;
};

const errInfo = (err) => ({
  code: err?.api_error?.err_code ?? null,
  status: err?.api_error?.code ?? err?.code ?? null,
  description: err?.api_error?.description ?? String(err?.message ?? err),
});

class Client {
  constructor(doc, codec, nc, js, jsm) {
    Object.assign(this, { doc, c: codec, nc, js, jsm, n: doc.names, queues: new Map(), rr: 0, turn: 0 });
  }

  async queue(name) {
    if (!this.queues.has(name)) {
      const stream = fill(this.doc.infoStream, { P: this.n.prefix, N: name }, "_");
      const info = await this.jsm.streams.info(stream);
      const meta = info.config.metadata ?? {};
      const partitions = Number(meta[this.n.metaPartitions]);
      if (!Number.isInteger(partitions) || partitions < 1) throw new Error(`stream ${stream}: metadata ${this.n.metaPartitions} is ${meta[this.n.metaPartitions]}`);
      const config = JSON.parse(meta[this.n.metaConfig] ?? "null");
      this.queues.set(name, { partitions, requiresSession: meta[this.n.metaRequiresSession] === "true", config });
    }
    return this.queues.get(name);
  }

  // send publishes one message to queue name; it returns where it went and
  // the acknowledgement or the error.
  async send(name, { type, body, messageId, props = {}, correlationId }) {
    const q = await this.queue(name);
    let p = 0;
    if (q.partitions > 1) p = messageId ? this.c.fnvMod(messageId, q.partitions) : this.rr++ % q.partitions;
    const k = messageId ? this.c.key(messageId) : randomKey(this.doc.randomKey.min, this.doc.randomKey.max);
    const vars = { P: this.n.prefix, N: name, p: String(p), "<k>": k };
    const subject = fill(messageId ? this.doc.withID : this.doc.withoutID, vars);
    const h = natsHeaders();
    const set = (k, v) => {
      if (v !== undefined && v !== "") h.set(k, this.c.escape(v));
    };
    set(this.n.hMessageID, messageId);
    set(this.n.hContentType, "application/json");
    set(this.n.hCorrelationID, correlationId);
    set(this.n.hProp + this.n.typeProperty, type);
    for (const [k, v] of Object.entries(props)) set(this.n.hProp + k, v);
    if (messageId) for (const [k, v] of this.doc.dupHeaders) h.set(k, fill(v, vars));
    const data = typeof body === "string" ? enc.encode(body) : enc.encode(JSON.stringify(body));
    const sent = { queue: name, type, messageId: messageId ?? "", partition: p, subject, body: dec.decode(data) };
    try {
      const pa = await this.js.publish(subject, data, { headers: h, timeout: 5000 });
      return { ...sent, ok: true, stream: pa.stream, seq: pa.seq, duplicateFlag: pa.duplicate };
    } catch (err) {
      return { ...sent, ok: false, error: errInfo(err) };
    }
  }

  // publishRaw publishes on any subject as a JetStream publish; for the
  // subjects the server must refuse.
  async publishRaw(subject, type) {
    const h = natsHeaders();
    h.set(this.n.hProp + this.n.typeProperty, type);
    try {
      const pa = await this.js.publish(subject, enc.encode("{}"), { headers: h, timeout: 5000 });
      return { subject, refused: false, stream: pa.stream, seq: pa.seq };
    } catch (err) {
      return { subject, refused: true, error: errInfo(err) };
    }
  }

  // consumers returns the receive consumer of every partition of a queue,
  // or of its dead-letter queue.
  async consumers(name, deadLetter = false) {
    if (deadLetter) {
      const stream = fill(this.doc.dlStream, { P: this.n.prefix, N: name }, "_");
      return [{ stream, partition: 0, c: await this.js.consumers.get(stream, this.n.consumer) }];
    }
    const q = await this.queue(name);
    const out = [];
    for (let p = 0; p < q.partitions; p++) {
      const stream = fill(this.doc.recvStream, { P: this.n.prefix, N: name, p: String(p) }, "_");
      out.push({ stream, partition: p, c: await this.js.consumers.get(stream, this.n.consumer) });
    }
    return out;
  }

  // delivery reads a received message as the document describes it.
  delivery(m, partition) {
    const tpl = this.doc.ackTemplate.split(".");
    const at = tpl.indexOf("<delivered>");
    const reply = m.reply.split(".");
    const headers = {};
    for (const k of m.headers?.keys() ?? []) headers[k] = this.c.unescape(m.headers.get(k));
    return {
      subject: m.subject,
      partition,
      deliveryCount: at >= 0 ? Number(reply[at]) : NaN,
      clientDeliveryCount: m.info.deliveryCount, // the nats package's own reading
      streamSeq: m.info.streamSequence,
      headers,
      body: dec.decode(m.data),
      m,
    };
  }

  // complete replies the settle table's "complete" and waits for the
  // server's confirmation.
  async complete(d) {
    await this.nc.request(d.m.reply, enc.encode(this.doc.settle.complete), { timeout: 5000 });
  }

  abandon(d) {
    this.nc.publish(d.m.reply, enc.encode(this.doc.settle.abandon));
  }

  // next pulls one message from any of the consumers, trying each for a
  // short while in turn, until within ms has passed; null if none came.
  async next(cons, ms) {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      const { c, partition } = cons[this.turn++ % cons.length];
      const m = await c.next({ expires: Math.max(1000, Math.min(2000, until - Date.now())) });
      if (m) return this.delivery(m, partition);
    }
    return null;
  }
}

// ---------------------------------------------------------------------------
// The scenario.

async function main() {
  const [docPath, url, queuesJSON] = process.argv.slice(2);
  if (!docPath || !url || !queuesJSON) {
    log("usage: node client.mjs <docs/wire.md> <nats URL> <queues JSON>");
    process.exit(2);
  }
  const Q = JSON.parse(queuesJSON);
  const summary = { failures: [], vectorsChecked: 0, sends: [], duplicate: null, events: [], codes: {}, deadLetters: [], wrongSubjects: [], poison: null, doc: {} };
  const fail = (msg) => {
    log("FAIL:", msg);
    summary.failures.push(msg);
  };

  let doc;
  try {
    doc = readDoc(docPath);
  } catch (err) {
    if (err instanceof DocError) {
      log(`docs/wire.md: ${err.message}`);
      console.log(JSON.stringify({ ...summary, failures: [`docs/wire.md: ${err.message}`] }));
      process.exit(0);
    }
    throw err;
  }
  const codec = makeCodec(doc);
  const vf = checkVectors(doc, codec);
  summary.vectorsChecked = doc.vectors.length - vf.length;
  summary.doc = { names: doc.names, withID: doc.withID, withoutID: doc.withoutID, dupHeaders: doc.dupHeaders, dupCodes: doc.dupCodes, recvStream: doc.recvStream, dlStream: doc.dlStream, wrong: doc.wrong };
  if (vf.length > 0) {
    for (const f of vf) fail(`test vector: ${f}`);
    console.log(JSON.stringify(summary)); // send nothing with encodings that disagree
    process.exit(0);
  }
  log(`the document's ${doc.vectors.length} test vectors agree with this client's encodings`);

  const nc = await connect({ servers: url, name: "jetsaga-wiretest-node" });
  const js = nc.jetstream({ timeout: 5000 });
  const jsm = await nc.jetstreamManager({ timeout: 5000 });
  const cl = new Client(doc, codec, nc, js, jsm);
  const N = doc.names;

  // Events: read every partition of the events queue in the background,
  // completing each; awaitEvent takes the first unclaimed one that fits.
  const eventCons = await cl.consumers(Q.events);
  const inbox = [];
  let reading = true;
  const readEvents = (async () => {
    while (reading) {
      const d = await cl.next(eventCons, 1000);
      if (!d) continue;
      const ev = { type: d.headers[N.hProp + N.typeProperty], messageId: d.headers[N.hMessageID] ?? "", deliveryCount: d.deliveryCount, partition: d.partition, subject: d.subject, body: JSON.parse(d.body) };
      const wantSubject = fill(doc.deliverySubject, { P: N.prefix, N: Q.events, p: String(d.partition) });
      if (d.subject !== wantSubject) fail(`event delivered on ${d.subject}, the document says ${wantSubject}`);
      if (d.deliveryCount !== d.clientDeliveryCount) fail(`delivery count ${d.deliveryCount} from the reply subject as the document reads it, ${d.clientDeliveryCount} by the nats package`);
      log(`event ${ev.type} ${JSON.stringify(ev.body)} (delivery ${ev.deliveryCount}, partition ${ev.partition})`);
      await cl.complete(d);
      summary.events.push({ type: ev.type, login: ev.body.Login, messageId: ev.messageId, deliveryCount: ev.deliveryCount, body: ev.body });
      inbox.push(ev);
    }
  })().catch((err) => fail(`reading events: ${err?.stack ?? err}`));
  const awaitEvent = async (type, login) => {
    const until = Date.now() + STEP_MS;
    while (Date.now() < until) {
      const i = inbox.findIndex((e) => e.type === type && e.body.Login === login);
      if (i >= 0) return inbox.splice(i, 1)[0];
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`no ${type} for ${login} within ${STEP_MS} ms`);
  };

  const send = async (what, m, expect) => {
    const r = await cl.send(Q.auth, m);
    summary.sends.push({ what, expect, ...r });
    log(`send ${what}: ${r.ok ? `stored in ${r.stream} seq ${r.seq}` : `error ${JSON.stringify(r.error)}`} (${r.subject})`);
    if (!r.ok && expect !== "duplicate") fail(`send ${what} refused: ${JSON.stringify(r.error)}`);
    return r;
  };
  const T = (t) => `twofactor.${t}`;

  const step = async (what, f) => {
    try {
      await f();
    } catch (err) {
      fail(`${what}: ${err?.message ?? err}`);
    }
  };

  // ann: with MessageIDs; the start is sent twice; a wrong code, then the
  // right one. Her start carries a property that must be escaped.
  await step("ann", async () => {
    await send("ann start", { type: T("CodeRequested"), body: { Login: "node-ann", User: "ann" }, messageId: "node-ann-start", props: { note: " padded " }, correlationId: "corr ann" }, "handled");
    const dup = await send("ann start again", { type: T("CodeRequested"), body: { Login: "node-ann", User: "ann" }, messageId: "node-ann-start" }, "duplicate");
    summary.duplicate = dup.ok ? { refused: false, duplicateFlag: dup.duplicateFlag } : { refused: true, ...dup.error };
    if (dup.ok) fail(`the duplicate was stored (seq ${dup.seq}), not refused`);
    else if (!doc.dupCodes.includes(dup.error.code)) fail(`the duplicate was refused with err_code ${dup.error.code}, the document says ${doc.dupCodes.join(" or ")}`);
    const issued = await awaitEvent(T("CodeIssued"), "node-ann");
    summary.codes["node-ann"] = issued.body.Code;
    await send("ann wrong code", { type: T("CodeEntered"), body: { Login: "node-ann", Code: wrongCode(issued.body.Code, 1) }, messageId: "node-ann-try-1" }, "handled");
    const rej = await awaitEvent(T("CodeRejected"), "node-ann");
    if (rej.body.Remaining !== 2) fail(`ann: CodeRejected.Remaining ${rej.body.Remaining}, want 2`);
    await send("ann right code", { type: T("CodeEntered"), body: { Login: "node-ann", Code: issued.body.Code }, messageId: "node-ann-try-2" }, "handled");
    await awaitEvent(T("Verified"), "node-ann");
  });

  // bob: no MessageIDs; the right code at once.
  await step("bob", async () => {
    await send("bob start", { type: T("CodeRequested"), body: { Login: "node-bob", User: "bob" } }, "handled");
    const issued = await awaitEvent(T("CodeIssued"), "node-bob");
    summary.codes["node-bob"] = issued.body.Code;
    await send("bob right code", { type: T("CodeEntered"), body: { Login: "node-bob", Code: issued.body.Code } }, "handled");
    await awaitEvent(T("Verified"), "node-bob");
  });

  // carol: three wrong codes.
  await step("carol", async () => {
    await send("carol start", { type: T("CodeRequested"), body: { Login: "node-carol", User: "carol" }, messageId: "node-carol-start" }, "handled");
    const issued = await awaitEvent(T("CodeIssued"), "node-carol");
    summary.codes["node-carol"] = issued.body.Code;
    for (let i = 1; i <= 3; i++) {
      await send(`carol wrong code ${i}`, { type: T("CodeEntered"), body: { Login: "node-carol", Code: wrongCode(issued.body.Code, i) }, messageId: `node-carol-try-${i}` }, "handled");
      if (i < 3) await awaitEvent(T("CodeRejected"), "node-carol");
    }
    const failed = await awaitEvent(T("Failed"), "node-carol");
    if (failed.body.Reason !== "too many attempts") fail(`carol: Failed.Reason ${JSON.stringify(failed.body.Reason)}`);
  });

  // dan: started without a MessageID and left running.
  await step("dan", async () => {
    await send("dan start", { type: T("CodeRequested"), body: { Login: "node-dan", User: "dan" } }, "handled");
    const issued = await awaitEvent(T("CodeIssued"), "node-dan");
    summary.codes["node-dan"] = issued.body.Code;
  });

  // Malformed bodies and an unknown type: dead-lettered with their
  // reasons, read back from the dead-letter queue.
  await step("dead letters", async () => {
    const bad = [
      await send("malformed: not JSON", { type: T("CodeEntered"), body: "{not json", messageId: "node-malformed-1" }, "dead-letter"),
      await send("malformed: a number for a string", { type: T("CodeEntered"), body: '{"Login":"node-eve","Code":123456}', messageId: "node-malformed-2" }, "dead-letter"),
      await send("unknown type", { type: T("CodeForgotten"), body: { Login: "node-eve" }, messageId: "node-unknown-1" }, "dead-letter"),
    ];
    const want = new Map([
      ["node-malformed-1", N.reasonMalformed],
      ["node-malformed-2", N.reasonMalformed],
      ["node-unknown-1", N.reasonUnknown],
    ]);
    const cons = await cl.consumers(Q.auth, true);
    const until = Date.now() + STEP_MS;
    while (want.size > 0 && Date.now() < until) {
      const d = await cl.next(cons, until - Date.now());
      if (!d) break;
      const h = d.headers;
      const id = h[N.hMessageID] ?? "";
      const sent = bad.find((s) => s.messageId === id);
      const seq = /^\d+$/.test(h[N.hDLSeq] ?? "") ? BigInt(h[N.hDLSeq]) : null;
      const entry = { messageId: id, subject: d.subject, reason: h[N.hDLReason] ?? "", description: h[N.hDLDescription] ?? "", source: h[N.hDLSource] ?? "", seq: h[N.hDLSeq] ?? "", type: h[N.hProp + N.typeProperty] ?? "", deliveryCount: d.deliveryCount };
      summary.deadLetters.push(entry);
      log(`dead letter ${JSON.stringify(entry)}`);
      if (d.subject !== fill(doc.dlSubject, { P: N.prefix, N: Q.auth })) fail(`dead letter on ${d.subject}, the document says ${doc.dlSubject}`);
      if (!want.has(id)) fail(`an unexpected dead letter: ${JSON.stringify(entry)}`);
      else {
        if (entry.reason !== want.get(id)) fail(`dead letter ${id}: reason ${entry.reason}, want ${want.get(id)}`);
        if (entry.source !== Q.auth) fail(`dead letter ${id}: source ${entry.source}, want ${Q.auth}`);
        if (entry.description === "") fail(`dead letter ${id}: no description`);
        if (seq === null || seq === 0n) fail(`dead letter ${id}: ${N.hDLSeq} ${JSON.stringify(entry.seq)} is no positive decimal`);
        else if (Number(seq >> 48n) !== sent.partition) fail(`dead letter ${id}: ${N.hDLSeq} ${seq} has partition ${seq >> 48n} in its top 16 bits, it was sent to ${sent.partition}`);
        if (d.body !== sent.body) fail(`dead letter ${id}: body ${JSON.stringify(d.body)}, sent ${JSON.stringify(sent.body)}`);
        if (entry.type !== sent.type) fail(`dead letter ${id}: type ${entry.type}, sent ${sent.type}`);
        want.delete(id);
      }
      await cl.complete(d);
    }
    if (want.size > 0) fail(`not dead-lettered within ${STEP_MS} ms: ${[...want.keys()].join(", ")}`);
  });

  // Wrong subjects under the probe queue's prefix: each publish must get
  // an error. The probe queue has one partition and no sessions.
  await step("wrong subjects", async () => {
    await cl.queue(Q.probe);
    const vars = { P: N.prefix, N: Q.probe, p: "0", "<k>": codec.key("node-probe"), "<sid>": codec.token("probe session") };
    for (const t of doc.wrong) {
      const r = await cl.publishRaw(fill(t, vars), "wiretest.WrongSubject");
      summary.wrongSubjects.push({ template: t, ...r });
      log(`wrong subject ${r.subject}: ${r.refused ? `refused ${JSON.stringify(r.error)}` : `ACCEPTED into ${r.stream} seq ${r.seq}`}`);
      if (!r.refused) fail(`a publish on ${r.subject} (${t}) was acknowledged (${r.stream} seq ${r.seq}), the document says the server refuses it`);
    }
    // "A publish to a queue that does not exist is refused the same way."
    const none = await cl.publishRaw(fill(doc.withID, { ...vars, N: "no-such-queue" }), "wiretest.WrongSubject");
    summary.wrongSubjects.push({ template: `${doc.withID} of a queue that does not exist`, ...none });
    log(`no such queue ${none.subject}: ${none.refused ? `refused ${JSON.stringify(none.error)}` : `ACCEPTED into ${none.stream} seq ${none.seq}`}`);
    if (!none.refused) fail(`a publish to a queue that does not exist (${none.subject}) was acknowledged`);
  });

  // Poison: a message that only this client receives and abandons every
  // time must end in the dead-letter queue after MaxDeliveryCount
  // deliveries, with its reason.
  await step("poison", async () => {
    const q = await cl.queue(Q.poison);
    const max = q.config?.MaxDeliveryCount;
    log(`queue ${Q.poison}: ${N.metaConfig} ${JSON.stringify(q.config)}`);
    const p = { maxDeliveryCount: max ?? null, deliveries: [], deadLetter: null };
    summary.poison = p;
    if (!Number.isInteger(max)) fail(`queue ${Q.poison}: no MaxDeliveryCount in its ${N.metaConfig} metadata`);
    const r = await cl.send(Q.poison, { type: "wiretest.Poison", body: { poison: true }, messageId: "node-poison-1" });
    if (!r.ok) throw new Error(`send to ${Q.poison} refused: ${JSON.stringify(r.error)}`);
    const cons = await cl.consumers(Q.poison);
    const dlq = await cl.consumers(Q.poison, true);
    const until = Date.now() + 45_000;
    while (Date.now() < until && !p.deadLetter && !(Number.isInteger(max) && p.deliveries.length >= max + 3)) {
      const d = await cl.next(cons, 1000);
      if (d) {
        p.deliveries.push(d.deliveryCount);
        log(`poison delivery ${d.deliveryCount}: abandoned`);
        cl.abandon(d);
      }
      const dl = await dlq[0].c.next({ expires: 1000 });
      if (dl) {
        const x = cl.delivery(dl, 0);
        p.deadLetter = { messageId: x.headers[N.hMessageID] ?? "", reason: x.headers[N.hDLReason] ?? "", description: x.headers[N.hDLDescription] ?? "", source: x.headers[N.hDLSource] ?? "", seq: x.headers[N.hDLSeq] ?? "" };
        log(`poison dead letter ${JSON.stringify(p.deadLetter)}`);
        await cl.complete(x);
      }
    }
    if (Number.isInteger(max) && p.deliveries.length > max) fail(`poison: delivered ${p.deliveries.length} times, MaxDeliveryCount is ${max}`);
    if (!p.deadLetter) fail(`poison: not in the dead-letter queue after ${p.deliveries.length} deliveries (counts ${p.deliveries.join(",")}) and 45 s`);
    else {
      if (p.deadLetter.reason !== N.reasonMaxDelivery) fail(`poison: dead-letter reason ${p.deadLetter.reason}, want ${N.reasonMaxDelivery}`);
      if (p.deadLetter.messageId !== "node-poison-1") fail(`poison: dead letter's MessageID ${p.deadLetter.messageId}`);
    }
  });

  // Let the event reader finish what it has, then check no event came
  // twice (by MessageID).
  reading = false;
  await readEvents;
  const ids = summary.events.map((e) => e.messageId);
  for (const id of new Set(ids)) {
    if (!id) fail("an event without a MessageID");
    else if (ids.filter((x) => x === id).length > 1) fail(`event ${id} received ${ids.filter((x) => x === id).length} times`);
  }

  await nc.drain();
  console.log(JSON.stringify(summary));
  clearTimeout(overall);
}

// wrongCode returns a code that differs from code in its last digit.
function wrongCode(code, i) {
  const last = (Number(code.at(-1)) + i) % 10;
  return code.slice(0, -1) + String(last);
}

main().catch((err) => {
  log("crashed:", err?.stack ?? err);
  process.exit(1);
});
