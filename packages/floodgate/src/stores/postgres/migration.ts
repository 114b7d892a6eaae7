import { quoteIdentifier } from '../sql/common.js';
import { PORT_VERSION, portFunctionNames, portFunctions } from './port.js';
import { functionName, literal, migrationOpening, type SqlNames } from './sql.js';

/**
 * The whole schema in one idempotent statement: a DO block run under an advisory lock, so that several
 * processes migrating at once neither fail nor interleave. It creates the table, its expiry index and the
 * state type when missing, and the functions of this version of the port (port.ts) beside those of any
 * other version, which keep serving the processes that still run it.
 */
export function migrationStatement(n: SqlNames, unlogged: boolean): string {
  const persistence = unlogged ? 'u' : 'p';
  return `${migrationOpening(n.schema)}  -- The name may already be taken by another kind of relation (an index, a view): say so, never use it.
  IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
      WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.table)} AND c.relkind <> 'r') THEN
    RAISE EXCEPTION 'floodgate: % exists in schema % and is not a table', ${literal(n.table)}, ${literal(n.schema)}
      USING ERRCODE = '42809';
  END IF;
  CREATE ${unlogged ? 'UNLOGGED ' : ''}TABLE IF NOT EXISTS ${n.qualified} (
    key text COLLATE "C" NOT NULL,
    state float8[],
    expires_at bigint NOT NULL,
    CONSTRAINT ${quoteIdentifier(n.primaryKeyName)} PRIMARY KEY (key)
  ) WITH (fillfactor = 80);
  IF (SELECT c.relpersistence FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
      WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.table)}) <> '${persistence}' THEN
    ALTER TABLE ${n.qualified} SET ${unlogged ? 'UNLOGGED' : 'LOGGED'};
  END IF;
  -- The composite type of the states, checked by its shape, not just its name.
  IF NOT EXISTS (SELECT 1 FROM pg_type y JOIN pg_namespace s ON s.oid = y.typnamespace
      WHERE s.nspname = ${literal(n.schema)} AND y.typname = ${literal(n.stateTypeName)}) THEN
    CREATE TYPE ${n.stateType} AS (s float8[]);
  ELSIF ${stateTypeShape(n.schema, n.stateTypeName)} <> 1 THEN
    RAISE EXCEPTION 'floodgate: type %.% exists and is not a composite (s float8[])', ${literal(n.schema)},
      ${literal(n.stateTypeName)} USING ERRCODE = '42809';
  END IF;
  -- Earlier versions named the index <table>_expires_at and the primary key <table>_pkey: both are renamed
  -- (a change of the catalog only, no index is built), unless the new name is taken already.
  IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_namespace s ON s.oid = x.relnamespace
      WHERE s.nspname = ${literal(n.schema)} AND x.relname = ${literal(`${n.table}_expires_at`)}
        AND i.indrelid = ${literal(n.qualified)}::regclass) THEN
    IF EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
        WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.expiryIndexName)}) THEN
      DROP INDEX ${quoteIdentifier(n.schema)}.${quoteIdentifier(`${n.table}_expires_at`)};
    ELSE
      ALTER INDEX ${quoteIdentifier(n.schema)}.${quoteIdentifier(`${n.table}_expires_at`)}
        RENAME TO ${quoteIdentifier(n.expiryIndexName)};
    END IF;
  END IF;
  CREATE INDEX IF NOT EXISTS ${quoteIdentifier(n.expiryIndexName)} ON ${n.qualified} (expires_at);
  IF EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = ${literal(n.qualified)}::regclass AND k.contype = 'p'
        AND k.conname = ${literal(`${n.table}_pkey`)})
      AND NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
        WHERE s.nspname = ${literal(n.schema)} AND c.relname = ${literal(n.primaryKeyName)}) THEN
    ALTER TABLE ${n.qualified} RENAME CONSTRAINT ${quoteIdentifier(`${n.table}_pkey`)}
      TO ${quoteIdentifier(n.primaryKeyName)};
  END IF;
${portFunctions(n).join('\n')}
  -- Earlier versions named the type <table>_state, a name another table's row type may need: the
  -- functions above no longer use it, so it goes (when it is that type, and nothing else uses it).
  IF ${stateTypeShape(n.schema, `${n.table}_state`)} = 1 THEN
    BEGIN
      DROP TYPE ${quoteIdentifier(n.schema)}.${quoteIdentifier(`${n.table}_state`)};
    EXCEPTION WHEN dependent_objects_still_exist THEN
      NULL;
    END;
  END IF;
END
$migrate$`;
}

/** SQL counting the types of that name that are a stand-alone composite `(s float8[])`: 1 or 0. */
function stateTypeShape(schema: string, name: string): string {
  return `(SELECT count(*) FROM pg_type y JOIN pg_namespace s ON s.oid = y.typnamespace
      JOIN pg_class c ON c.oid = y.typrelid
      WHERE s.nspname = ${literal(schema)} AND y.typname = ${literal(name)} AND c.relkind = 'c'
        AND (SELECT array_agg(a.attname::text || ' ' || format_type(a.atttypid, a.atttypmod))
          FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
          = ARRAY['s double precision[]'])`;
}

/** The names of the functions of the port before it carried a version. */
const UNVERSIONED = [
  'append',
  'coalesce',
  'log_denied',
  'intervals',
  'run',
  'policy',
  'settle',
  'decide',
  'cancel',
  'refund',
];

/** A version of the port, as it appears at the end of its functions' names. */
const VERSION = /^v[0-9a-f]{8}$/;

/**
 * The statement listing the versions of the port whose functions are installed for a table: one row per
 * decide function (`version` is '' for the port from before versions). Parameters: schema, table.
 */
export const INSTALLED_VERSIONS = `SELECT substr(p.proname, length($2) + 9) AS version
  FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
  WHERE s.nspname = $1 AND left(p.proname, length($2) + 7) = $2 || '_decide'
    AND (length(p.proname) = length($2) + 7 OR substr(p.proname, length($2) + 8) ~ '^_v[0-9a-f]{8}$')
  ORDER BY 1`;

/**
 * Drops the functions of every version of the port but this one (`PORT_VERSION`), for one table, under
 * the migration's advisory lock: once no process runs another version any more.
 */
export function dropVersionsStatement(n: SqlNames, versions: readonly string[]): string {
  const names = new Set<string>();
  for (const version of versions) {
    if (version === PORT_VERSION || !(version === '' || VERSION.test(version))) continue;
    for (const name of version === '' ? UNVERSIONED : [...UNVERSIONED, ...portFunctionNames()]) {
      names.add(functionName(n.table, name, version));
    }
  }
  return `DO $drop$
DECLARE
  f regprocedure;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('floodgate migrate'));
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace s ON s.oid = p.pronamespace
      WHERE s.nspname = ${literal(n.schema)} AND p.proname = ANY (ARRAY[${[...names].map(literal).join(', ') || "''"}]::text[])
  LOOP
    EXECUTE 'DROP FUNCTION ' || f::text;
  END LOOP;
END
$drop$`;
}
