// A batch import charged per record: each tenant may write 10,000 rows at once and 500 rows per second
// after that. The cost of a call is its number of records, so one request of 4,000 rows counts as much as
// 4,000 requests of one. A batch larger than the bucket can never pass (`exceeds-capacity`): the
// caller splits it. A manual clock stands in for time, and waiting is advancing it.
//
//   npm run build && npx tsx packages/floodgate/examples/batch-import.ts
import { createLimiter, tokenBucket } from 'floodgate';
import { manualClock } from 'floodgate/testing';

const start = Date.UTC(2030, 0, 1, 12);
const clock = manualClock({ startMs: start });
const rows = createLimiter({
  prefix: 'import',
  clock,
  policies: tokenBucket({ name: 'rows', capacity: 10_000, refillAmount: 500, refillIntervalMs: 1_000 }),
});

function at(): string {
  return `t=${((clock.nowMs() - start) / 1000).toFixed(1).padStart(5)}s`;
}

function importBatch(tenant: string, records: number): boolean {
  const decision = rows.limitSync(tenant, { cost: records });
  if (decision.allowed) {
    console.log(`${at()} ${tenant} imports ${records} rows: accepted, ${decision.remaining} rows of room left`);
  } else if (decision.reason === 'exceeds-capacity') {
    console.log(`${at()} ${tenant} imports ${records} rows: rejected, larger than ${decision.limit} rows: split it`);
  } else {
    console.log(`${at()} ${tenant} imports ${records} rows: not now, retry in ${decision.retryAfterMs} ms`);
  }
  return decision.allowed;
}

/** Splits a large import into chunks and waits, as told, whenever the bucket is short. */
function importInChunks(tenant: string, records: number, chunk: number): void {
  for (let done = 0; done < records; done += chunk) {
    const size = Math.min(chunk, records - done);
    for (;;) {
      const decision = rows.limitSync(tenant, { cost: size });
      if (decision.allowed) break;
      if (decision.reason === 'exceeds-capacity') throw new Error(`a chunk of ${size} rows can never pass`);
      clock.advance(decision.retryAfterMs); // a service would sleep here
    }
    console.log(`${at()} ${tenant} chunk of ${size} rows accepted (${done + size}/${records})`);
  }
}

importBatch('tenant-a', 2_500);
importBatch('tenant-a', 6_000);
importBatch('tenant-a', 4_000); // 1,500 rows of room: 2,500 more take 5 s at 500 per second

clock.advance(5_000);
importBatch('tenant-a', 4_000);

// Refused whole, and nothing is consumed: the 10,000-row bucket can never hold 25,000.
importBatch('tenant-a', 25_000);
importInChunks('tenant-a', 25_000, 5_000);

// Another tenant has a bucket of its own.
importBatch('tenant-b', 10_000);
