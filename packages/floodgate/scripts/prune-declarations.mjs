// Deletes the declaration files that no entry point of the package reaches. `exports` lets a user import
// only the entry points, so a declaration that none of theirs imports, directly or through another, can
// never be read by a compiler: the internals' types (the stores' ports, the memory store's tables) would
// ship for nothing. In the ones kept, the TSDoc of private members goes too: no editor shows a private
// member outside its class, and the member's declaration (which keeps the class nominal) stays.
//
//   node scripts/prune-declarations.mjs dist
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const dist = resolve(process.argv[2] ?? 'dist');
const manifest = JSON.parse(readFileSync('package.json', 'utf8'));
const reached = new Set();
const pending = Object.values(manifest.exports)
  .map((target) => (typeof target === 'object' ? target.types : undefined))
  .filter((types) => types !== undefined)
  .map((types) => resolve(types));
while (pending.length > 0) {
  const file = pending.pop();
  if (reached.has(file)) continue;
  if (!existsSync(file)) throw new Error(`${file} is imported by a declaration but does not exist`);
  reached.add(file);
  // `from './x.js'` (imports and re-exports) and `import('./x.js')` (inline type imports).
  for (const [, path] of readFileSync(file, 'utf8').matchAll(/(?:\bfrom|\bimport\s*\()\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
    pending.push(resolve(dirname(file), path.replace(/\.js$/, '.d.ts')));
  }
}

// A TSDoc comment (with no end of comment inside) right before a `private` member's declaration.
const PRIVATE_DOC = /\n[ \t]*\/\*\*(?:(?!\*\/)[\s\S])*?\*\/(?=\n[ \t]*private\b)/g;

let removed = 0;
let privateDocs = 0;
function walk(dir) {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) walk(path);
    else if (path.endsWith('.d.ts') && !reached.has(path)) {
      rmSync(path);
      removed++;
    } else if (path.endsWith('.d.ts')) {
      const text = readFileSync(path, 'utf8');
      const kept = text.replace(PRIVATE_DOC, () => {
        privateDocs++;
        return '';
      });
      if (kept !== text) writeFileSync(path, kept);
    }
  }
}
walk(dist);
console.error(
  `declarations: ${reached.size} reached from the entry points, ${removed} unreachable removed, ${privateDocs} private members' comments removed`,
);
