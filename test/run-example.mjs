// Runs one compiled README example in the scratch project, as a reader would, with one change: a server it
// starts listens on a free loopback port instead of the one the example names, so that runs never collide.
// Prints `{"ports":[…]}` once the example's code has run and its servers listen, then stays up for the test
// to send requests; an example that starts no server exits 0 there (the Redis or PostgreSQL connections it
// leaves open would otherwise keep it alive).
import net from 'node:net';
import { pathToFileURL } from 'node:url';

const listening = [];
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callback = typeof args.at(-1) === 'function' ? args.at(-1) : undefined;
  listening.push(
    new Promise((resolve, reject) => {
      this.once('listening', () => resolve(this.address().port));
      this.once('error', reject);
    }),
  );
  return callback === undefined ? listen.call(this, 0, '127.0.0.1') : listen.call(this, 0, '127.0.0.1', callback);
};

await import(pathToFileURL(process.argv[2]).href);
const ports = await Promise.all(listening);
process.stdout.write(`${JSON.stringify({ ports })}\n`);
if (ports.length === 0) process.exit(0);
