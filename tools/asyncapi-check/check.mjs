// Parse an AsyncAPI document (a file, or a URL a node serves) with @asyncapi/parser and
// print what it found; exit 1 on any error, naming each.
import { Parser, fromFile, fromURL } from '@asyncapi/parser';

const target = process.argv[2];
const parser = new Parser();
const source = /^https?:/.test(target) ? fromURL(parser, target) : fromFile(parser, target);
const { document, diagnostics } = await source.parse();
// Severity 0 is an error; warnings and hints do not fail the check.
const errors = diagnostics.filter((d) => d.severity === 0);
for (const d of errors) {
  console.error(`${d.code}: ${d.message} at /${d.path.join('/')}`);
}
if (!document || errors.length > 0) {
  console.error(`check-asyncapi: ${target}: ${errors.length} errors`);
  process.exit(1);
}
console.log(
  `check-asyncapi: ${target}: 0 errors, ${document.channels().length} channels, ` +
    `${document.messages().length} messages, ${document.operations().length} operations`,
);
