// Bundles each unit test (unit/*.test.ts) with the SDK into <out dir>/<name>.test.mjs for
// `node --test`, with every `reconciled:runtime/<interface>@<version>` import answered by the
// fake in unit/fake/<interface>.ts instead of the host.
//
//   node unit/bundle.mjs <out dir>

import { build } from 'esbuild';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error('usage: node unit/bundle.mjs <out dir>');
  process.exit(2);
}

const fakeRuntime = {
  name: 'fake-reconciled-runtime',
  setup(b) {
    b.onResolve({ filter: /^reconciled:runtime\// }, (args) => {
      const m = /^reconciled:runtime\/([a-z-]+)@[0-9.]+$/.exec(args.path);
      if (!m) {
        return { errors: [{ text: `unexpected import ${args.path}` }] };
      }
      return { path: join(here, 'fake', `${m[1]}.ts`) };
    });
  },
};

// The closing snippet of guests/js/README.md, as written: `readme.test.ts` imports it as
// 'readme-snippet', so the README shows code that bundles and runs.
const readme = readFileSync(join(here, '..', 'README.md'), 'utf8');
const snippet = /```ts\n([\s\S]*?)```/.exec(readme);
if (!snippet) {
  console.error('guests/js/README.md has no ```ts block');
  process.exit(1);
}
const snippetFile = join(out, 'readme-snippet.ts');
writeFileSync(snippetFile, snippet[1]);

const entries = readdirSync(here)
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => join(here, f));
await build({
  entryPoints: entries,
  bundle: true,
  format: 'esm',
  platform: 'node',
  outdir: out,
  outExtension: { '.js': '.mjs' },
  alias: {
    'reconciled-guest': join(here, '..', 'src', 'index.ts'),
    'readme-snippet': snippetFile,
  },
  plugins: [fakeRuntime],
  logLevel: 'warning',
});
