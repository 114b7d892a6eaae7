import { describeValue, FloodgateError } from '../../errors.js';

/**
 * A store's reply that is a list of integers: an array (the drivers give numbers, strings or bigints) or
 * a PostgreSQL array literal (`{1,-2,3}`), each a safe integer, and `fields` of them when given. Anything
 * else is a protocol error naming `what` answered it (`a permit script`).
 */
export function integerReply(value: unknown, what: string, fields?: number): number[] {
  let list: unknown = value;
  if (typeof value === 'string' && /^\{[-0-9,]*\}$/.test(value)) list = value.slice(1, -1).split(',');
  if (!Array.isArray(list) || (fields !== undefined && list.length !== fields)) {
    throw new FloodgateError('ERR_STORE_PROTOCOL', `${what} answered ${describeValue(value)}`);
  }
  return list.map((item: unknown) => {
    const x = Number(item);
    if (!Number.isSafeInteger(x))
      throw new FloodgateError('ERR_STORE_PROTOCOL', `${what} answered ${describeValue(item)}`);
    return x;
  });
}
