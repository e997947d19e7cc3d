#!/usr/bin/python3
"""redispy_worker.py - one storm worker for redis-py's Lock, driven by build/redisync-storm
(see README.md beside this file for the line protocol).

    /usr/bin/python3 redispy_worker.py --port P --key K --out FILE

Debian's python3-redis (4.3.4 on Debian 12), Lock with its documented defaults:
redis.Redis(...).lock(name): timeout=None (no expiry), sleep=0.1 (seconds between SET NX
attempts while blocked), blocking=True, blocking_timeout=None (wait for ever).
"""
import argparse
import sys
import time

import redis


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--port', type=int, required=True)
    ap.add_argument('--key', required=True)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    now = time.monotonic_ns  # CLOCK_MONOTONIC, as the driver's

    r = redis.Redis(host='127.0.0.1', port=a.port)
    lock = r.lock(a.key)  # documented defaults
    lock.acquire()  # warm-up: connection made, release script loaded
    lock.release()
    print('ready', flush=True)

    for line in sys.stdin:
        w = line.split()
        if not w or w[0] == 'quit':
            break
        if w[0] != 'go' or len(w) != 4:
            print('error bad command "%s"' % line.strip(), flush=True)
            return 1
        start, end, work = int(w[1]), int(w[2]), int(w[3]) * 1000
        while now() < start - 2000000:
            time.sleep((start - now()) / 1e9 - 0.001)
        while now() < start:
            pass
        recs = []
        while now() < end:
            t0 = now()
            lock.acquire()
            t1 = now()
            while now() - t1 < work:
                pass  # busy work, as the C workers do
            t2 = now()
            lock.release()
            t3 = now()
            recs.append('%d %d %d %d\n' % (t0, t1, t2, t3))
        with open(a.out, 'w') as f:
            f.writelines(recs)
        print('done %d 0' % len(recs), flush=True)
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except Exception as e:  # the driver reads this line and fails the row
        print('error %s: %s' % (type(e).__name__, e), flush=True)
        sys.exit(1)
