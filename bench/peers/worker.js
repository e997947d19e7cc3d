'use strict';
// worker.js - one storm worker for a node peer, driven by build/redisync-storm (see README.md
// beside this file for the line protocol).
//
//   node worker.js redlock|redis-semaphore --port P --key K --out FILE
//
// Each library is used with its documented defaults (the storm's table lists them):
//   redlock 4.2.0          new Redlock([client]): driftFactor 0.01, retryCount 10,
//                          retryDelay 200 ms, retryJitter 100 ms; lock(key, 30000) (the ttl
//                          has no default: 30000 ms is redisync's default lease)
//   redis-semaphore 5.8.0  new Mutex(client, key): retryInterval 10 ms, acquireTimeout
//                          10000 ms, lockTimeout 10000 ms, refreshInterval 8000 ms
// A lock call that gives up (redlock's LockError after its retries, redis-semaphore's
// TimeoutError) is counted as a failure and the loop calls lock again at once.

const fs = require('fs');
const readline = require('readline');
const Redis = require('ioredis');

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) {
    process.stdout.write(`error missing ${name}\n`);
    process.exit(2);
  }
  return process.argv[i + 1];
}

const lib = process.argv[2];
const port = Number(arg('--port'));
const key = arg('--key');
const out = arg('--out');
const now = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, in ns, as the driver's

const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
client.on('error', (e) => process.stderr.write(`worker ${process.pid}: ioredis: ${e.message}\n`));

let lock, unlock;
if (lib === 'redlock') {
  const Redlock = require('redlock');
  const redlock = new Redlock([client]); // documented defaults
  lock = () => redlock.lock(key, 30000);
  unlock = (l) => l.unlock();
} else if (lib === 'redis-semaphore') {
  const { Mutex } = require('redis-semaphore');
  lock = async () => {
    const m = new Mutex(client, key); // documented defaults
    await m.acquire();
    return m;
  };
  unlock = (m) => m.release();
} else {
  process.stdout.write(`error unknown library ${lib}\n`);
  process.exit(2);
}

function spinUntil(t) {
  while (now() < t) { /* busy work, as the C workers do */ }
}

async function phase(start, end, workNs) {
  const wait = Number(start - now()) / 1e6;
  if (wait > 1) await new Promise((r) => setTimeout(r, wait - 1));
  spinUntil(start);
  const recs = [];
  let fails = 0;
  while (now() < end) {
    const t0 = now();
    let l;
    try {
      l = await lock();
    } catch (e) {
      if (e && (e.name === 'LockError' || e.name === 'TimeoutError')) {
        fails++;
        continue;
      }
      throw e;
    }
    const t1 = now();
    spinUntil(t1 + workNs);
    const t2 = now();
    await unlock(l);
    const t3 = now();
    recs.push(`${t0} ${t1} ${t2} ${t3}\n`);
  }
  fs.writeFileSync(out, recs.join(''));
  process.stdout.write(`done ${recs.length} ${fails}\n`);
}

async function main() {
  await client.connect();
  await unlock(await lock()); // warm-up: connection ready, scripts loaded
  const rl = readline.createInterface({ input: process.stdin });
  process.stdout.write('ready\n');
  for await (const line of rl) {
    const w = line.trim().split(/\s+/);
    if (w[0] === 'quit') break;
    if (w[0] !== 'go' || w.length !== 4) {
      process.stdout.write(`error bad command "${line}"\n`);
      break;
    }
    await phase(BigInt(w[1]), BigInt(w[2]), BigInt(w[3]) * 1000n);
  }
  rl.close();
  client.disconnect();
}

main().catch((e) => {
  process.stdout.write(`error ${String(e && e.stack ? e.stack : e).split('\n')[0]}\n`);
  process.exit(1);
});
