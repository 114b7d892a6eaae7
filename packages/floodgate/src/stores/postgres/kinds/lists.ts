/*
 * The list code the sliding log and the bucketed window share (both keep `[blockedUntil, t1, n1, t2, n2, …]`,
 * pairs of a time and an amount, oldest first), written once as PL/pgSQL statements that each kind's port
 * inlines (a function call would cost every decision). In scope wherever they are used: the state `s`, its
 * length `len`, the first live pair's index `f` (1-based, the index of the time before it: the model's
 * `f`), `lim`, `a` (the window), `now`, `cost`, and `i`, `k` as loop variables.
 */

/** Skips the pairs at or before `cutoff`: `f` is left at the first live one (or at `len`). */
export function skipExpired(cutoff: string): string {
  return `WHILE f < len AND s[f + 1] <= ${cutoff} LOOP f := f + 2; END LOOP;`;
}

/** Adds the live amounts into `total`, newest first (the order the waits walk, so the sums are the model's). */
export function sumLive(total: string): string {
  return `i := len - 1;
      WHILE i > f LOOP
        ${total} := ${total} + s[i + 1];
        i := i - 2;
      END LOOP;`;
}

/** Sets `target` to the live pairs with `cost` added at time `at`: to the newest pair if it is at `at`, else as a new one. */
export function appendPair(target: string, at: string): string {
  return `${target} := ARRAY[0]::float8[] || coalesce(s[f + 1:len], '{}'::float8[]);
      k := array_length(${target}, 1);
      IF k > 1 AND ${target}[k - 1] = ${at} THEN
        ${target}[k] := ${target}[k] + cost;
      ELSE
        ${target}[k + 1] := ${at};
        ${target}[k + 2] := cost;
      END IF;`;
}

/**
 * Sets `target` to the wait until `cost` fits: walking from the newest pair back, summing into `acc`, the
 * first pair that no longer fits beside the newer ones must leave the window (`time + a − now`); the oldest
 * live pair when all of them must.
 */
export function waitToFit(target: string, acc: string): string {
  return `${target} := s[len - 1] + a - now;
      ${acc} := 0;
      i := len - 2;
      WHILE i >= f LOOP
        ${acc} := ${acc} + s[i + 2];
        IF ${acc} + cost > lim THEN
          ${target} := s[i + 1] + a - now;
          EXIT;
        END IF;
        i := i - 2;
      END LOOP;`;
}

/**
 * A lease's refund on a list (a port's `refund` block): the pair at time `at` loses the unused units, and
 * goes when nothing is left of it; `nx` stays NULL when no pair is at `at`.
 */
export function refundPair(at: string, declare = ''): string {
  return `DECLARE
      len int := coalesce(array_length(st, 1), 0);${declare}
      i int := 2;
      left_over float8;
    BEGIN
      WHILE i < len LOOP
        IF st[i] = ${at} THEN
          left_over := st[i + 1] - p_unused;
          IF left_over > 0 THEN
            nx := st;
            nx[i + 1] := left_over;
          ELSE
            nx := st[1:i - 1] || coalesce(st[i + 2:len], '{}'::float8[]);
          END IF;
          EXIT;
        END IF;
        i := i + 2;
      END LOOP;
    END;`;
}
