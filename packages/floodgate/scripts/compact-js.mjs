// Reprints the compiled JavaScript of the package (tsc's, comments already removed) with esbuild, which
// indents by two spaces where tsc indents by four and writes the same statements in their shorter
// equivalent forms (`minifySyntax`: `void 0`, `!0`, joined declarations; names, lines and files are kept,
// so stack traces still name the functions): template literals (the Lua and SQL the stores send) byte for
// byte, about 11 % fewer bytes to install. The declarations (tsc's, four spaces a level) are reindented by
// two spaces a level, every line and TSDoc comment kept.
//
//   node scripts/compact-js.mjs dist
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { transformSync } from 'esbuild';

function walk(dir) {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) walk(path);
    else if (path.endsWith('.js')) {
      const source = readFileSync(path, 'utf8');
      const { code } = transformSync(source, {
        format: 'esm',
        target: 'esnext',
        loader: 'js',
        charset: 'utf8',
        legalComments: 'none',
        minifySyntax: true,
        sourcefile: path,
      });
      writeFileSync(path, code);
    } else if (path.endsWith('.d.ts')) {
      writeFileSync(path, reindent(readFileSync(path, 'utf8')));
    }
  }
}

/** Two spaces for each four that start a line (a comment's ` *` after them stays where it was). */
function reindent(text) {
  return text.replace(/^( {4})+/gm, (spaces) => ' '.repeat(spaces.length / 2));
}

walk(process.argv[2] ?? 'dist');
