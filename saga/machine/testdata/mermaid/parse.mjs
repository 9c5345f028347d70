// Parses each Mermaid file named on the command line with Mermaid itself
// and prints one JSON line per file: {"file", "type"} when it parses,
// {"file", "error"} when it does not. Mermaid needs a DOM to load (its
// sanitizer does), which jsdom gives it; parsing draws nothing.
import fs from 'node:fs';
import { JSDOM } from 'jsdom';

const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false });

for (const file of process.argv.slice(2)) {
  try {
    const r = await mermaid.parse(fs.readFileSync(file, 'utf8'));
    console.log(JSON.stringify({ file, type: r.diagramType }));
  } catch (e) {
    console.log(JSON.stringify({ file, error: String(e?.message ?? e) }));
  }
}
