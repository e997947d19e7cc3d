#!/usr/bin/env python3
"""instr.py - the server's instructions per contended acquisition, counted with callgrind.

Usage: python3 bench/instr/instr.py [--n1 N] [--n2 N] [--only mutex,rwlock,sem]
       python3 bench/instr/instr.py --breakdown mutex [--redis-server PATH]
       python3 bench/instr/instr.py --cond
       (make bench-instr; INSTR_ARGS passes these)

One redis-server runs under `valgrind --tool=callgrind`. This program sends it, over one
plain socket (pipelined, every reply checked), the scripts exactly as the library embeds them
(primitives/core.lua, then primitives/NAME/NAME.lua with primitives/common.lua spliced in at
its "-- @common" line: scripts/embed-lua.sh) and the raw FIFO floor's two scripts (read from
bench/storm/impls.c), and for each primitive four workloads:

  contended   8 owners on one name: the holder's `rel` hands over to the queue's head, then
              the same owner's `acq` queues at the tail (one contended acquisition, two
              EVALSHAs: the storm's shape, every acquisition a handoff)
  uncontended `acq` + `rel` of one owner on a free name with nobody queued (a pair)
  renew       the holder's `renew` (the watchdog's call, every lease / 3 of every hold)
  floor       the raw FIFO lock's `rel` + `acq` in the same 8-owner cycle

Each workload runs N1 and then N2 times; `callgrind_control --dump` after each run gives the
instructions of that run alone, and (I(N2) - I(N1)) / (N2 - N1) is the cost of one, with the
constant costs (the connection, the first call's allocations, the server's idle ticks) gone.
Repeated runs differ by about 1% (Lua's GC steps, hash seeds); the figure does not depend on
the machine's load, unlike the storm's server time. Redis calls inside scripts per contended
acquisition come from INFO commandstats (every command but EVALSHA and this program's own)
over the N2 run of the contended cycle.

--breakdown PRIM runs only the floor's and PRIM's contended cycles, on two servers: one
counting everything, one under --collect-atstart=no --toggle-collect=scriptCall (counting
only inside the Redis commands that scripts call); bench/instr/breakdown.py turns the N1 and N2 runs' dumps into
tables per contended acquisition: inclusive costs of the EVALSHA's parts (client I/O and
dispatch, the EVALSHA around the script, luaCallFunction around lua_pcall, redis.call's glue,
scriptCall's checks, each command with its count, the script's own Lua), exclusive costs by
function group (Lua VM, Lua strings, Lua tables/GC, script machinery, commands, data
structures, allocator, libc, ...) outside and inside the scripts' commands, and the top
functions. Debian's redis-server is stripped (only exported functions are named);
bench/instr/redis-syms.sh builds the same version from Debian's source package, with
symbols, for --redis-server.

It prints one table; exit 0, or 1 on an error (the server does not start, a reply is not the
one the workload expects, valgrind or callgrind_control missing).
"""
import argparse
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K = 8            # owners in the contended cycle
LEASE = '30000'  # the library's default lease, ms
QLEASE = '30000'  # queue entry lease, ms
MAXW = '100000'
PREFIX = 'rs:client:'

# The primitives' keys (lib/keys.c: "rs:{NAME}:KIND[:SUFFIX]"; the suffixes are the ones of
# primitives/NAME/NAME.c) and their own ARGV[9..].
PRIMS = {
    'mutex': {'script': 'mutex', 'kind': 'mutex', 'suffixes': [None, 'fence', 'q', 'qi'],
              'extra': [], 'label': 'mutex'},
    'rwlock': {'script': 'rwlock', 'kind': 'rwlock',
               'suffixes': [None, 'fence', 'q', 'qi', 'rd', 'ri'], 'extra': ['w', ''],
               'label': 'rwlock (write)'},
    'sem': {'script': 'semaphore', 'kind': 'sem',
            'suffixes': [None, 'holders', 'hi', 'fence', 'q', 'qi'], 'extra': ['1', '1'],
            'label': 'semaphore (1 permit)'},
}


def fail(msg):
    sys.stderr.write('bench-instr: %s\n' % msg)
    sys.exit(1)


OVERRIDE = {}  # --script NAME=FILE: a candidate body in place of primitives/NAME/NAME.lua


def script_text(name):
    """The script body as scripts/embed-lua.sh builds it."""
    def rd(p):
        with open(os.path.join(ROOT, p), encoding='ascii') as f:
            return f.read()
    core, common = rd('primitives/core.lua'), rd('primitives/common.lua')
    body = rd(OVERRIDE.get(name, 'primitives/%s/%s.lua' % (name, name)))
    lines = body.split('\n')
    if '-- @common' in lines:
        i = lines.index('-- @common')
        return core + '\n'.join(lines[:i]) + ('\n' if i else '') + common + \
            '\n'.join(lines[i:])
    return core + common + body


def raw_scripts():
    with open(os.path.join(ROOT, 'bench/storm/impls.c'), encoding='ascii') as f:
        src = f.read()
    out = []
    for n in ('RAW_ACQ', 'RAW_REL'):
        m = re.search(r'static const char %s\[\] =((?:\s*"(?:[^"\\]|\\.)*")+);' % n, src)
        if not m:
            fail('bench/storm/impls.c: %s not found' % n)
        out.append(''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))))
    return out


def resp(*args):
    a = [x if isinstance(x, bytes) else str(x).encode() for x in args]
    s = b'*%d\r\n' % len(a)
    for x in a:
        s += b'$%d\r\n%s\r\n' % (len(x), x)
    return s


class Conn:
    """A pipelining RESP2 client: send many commands, then read and return every reply."""

    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.buf = b''

    def _line(self):
        while b'\r\n' not in self.buf:
            d = self.s.recv(1 << 16)
            if not d:
                fail('the server closed the connection')
            self.buf += d
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def _bulk(self, n):
        while len(self.buf) < n + 2:
            d = self.s.recv(1 << 16)
            if not d:
                fail('the server closed the connection')
            self.buf += d
        v, self.buf = self.buf[:n], self.buf[n + 2:]
        return v

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b'+':
            return rest.decode()
        if t == b'-':
            return Exception(rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            return None if n < 0 else self._bulk(n).decode()
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        fail('unexpected reply %r' % line)

    def pipe(self, cmds):
        """cmds: a list of RESP byte strings; returns their replies in order."""
        data = b''.join(cmds)
        self.s.setblocking(True)
        # the server's replies queue in its output buffer while we write (no limit for a
        # normal client), so writing everything first cannot deadlock
        self.s.sendall(data)
        return [self._reply() for _ in cmds]

    def call(self, *args):
        r = self.pipe([resp(*args)])[0]
        if isinstance(r, Exception):
            fail('%s: %s' % (args[0], r))
        return r


REDIS = ['redis-server']  # --redis-server PATH: another binary (bench/instr/redis-syms.sh)


class Server:
    def __init__(self, outdir, extra=(), vg=()):
        self.outdir = outdir
        self.runs = {}  # workload -> (N1 run's dump, N2 run's dump): measure()
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        self.port = s.getsockname()[1]
        s.close()
        self.log = open(os.path.join(outdir, 'valgrind.log'), 'w')
        self.p = subprocess.Popen(
            ['valgrind', '--tool=callgrind',
             '--callgrind-out-file=%s/cg.out' % outdir] + list(vg) +
            [REDIS[0], '--port', str(self.port), '--bind', '127.0.0.1',
             '--save', '', '--appendonly', 'no'] + list(extra),
            stdout=subprocess.DEVNULL, stderr=self.log)
        for _ in range(300):
            try:
                self.c = Conn(self.port)
                if self.c.call('PING') == 'PONG':
                    break
            except OSError:
                time.sleep(0.1)
        else:
            self.stop()
            fail('redis-server under valgrind did not answer on port %d' % self.port)
        self.dumps = 0
        self.dump()  # the start-up's instructions go into a dump of their own

    def dump(self):
        """Instructions since the previous dump."""
        r = subprocess.run(['callgrind_control', '--dump', str(self.p.pid)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            fail('callgrind_control --dump failed: %s' % r.stdout.strip())
        self.dumps += 1
        path = os.path.join(self.outdir, 'cg.out.%d' % self.dumps)
        self.last = path
        for _ in range(100):
            if os.path.exists(path):
                with open(path) as f:
                    txt = f.read()
                m = re.search(r'^totals:\s*(\d+)', txt, re.M)
                if m:
                    return int(m.group(1))
            time.sleep(0.05)
        fail('no callgrind dump %s' % path)

    def stop(self):
        try:
            s = socket.create_connection(('127.0.0.1', self.port))
            s.sendall(resp('SHUTDOWN', 'NOSAVE'))
            s.recv(1 << 10)  # the server closes the connection as it exits
            s.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def check(replies, want, what):
    for i, (r, w) in enumerate(zip(replies, want)):
        if isinstance(r, Exception):
            fail('%s: call %d failed: %s' % (what, i, r))
        if w is not None and not w(r):
            fail('%s: call %d: unexpected reply %r' % (what, i, r))


def granted(r):
    return isinstance(r, list) and r[0] == 1


def queued(r):
    return isinstance(r, list) and r[0] == 0 and r[2] == 1


def one(r):
    return r == 1


class Prim:
    def __init__(self, srv, key, name):
        p = PRIMS[key]
        self.srv, self.p = srv, p
        self.keys = ['rs:{%s}:%s' % (name, p['kind']) + (':' + s if s else '')
                     for s in p['suffixes']]
        text = script_text(p['script'])
        self.sha = srv.c.call('SCRIPT', 'LOAD', text)
        if self.sha != hashlib.sha1(text.encode()).hexdigest():
            fail('SCRIPT LOAD returned another SHA1')

    def ev(self, op, tok, acq):
        return resp('EVALSHA', self.sha, len(self.keys), *self.keys, op, tok, acq, LEASE,
                    PREFIX, 'q', MAXW, QLEASE, *self.p['extra'])


def acq_id(owner, n):
    """shaped like lib/hold.c's: PUBLICID (16 hex) ":" N (hex) "." SECRET (16 hex), so that
    members and values have the library's lengths (Redis picks a key's encoding by them)"""
    return '%016x:%x.%016x' % (0x5eed0000 + owner, n, (0x9e3779b97f4a7c15 * (n + 1) + owner)
                               % (1 << 64))


def commandstats(c):
    txt = c.call('INFO', 'commandstats')
    out = {}
    for m in re.finditer(r'^cmdstat_([^:]+):calls=(\d+)', txt, re.M):
        out[m.group(1)] = int(m.group(2))
    return out


OWN = ('evalsha', 'config', 'info', 'script', 'ping', 'shutdown')


def measure(srv, work, n1, n2, setup=None):
    """work(n) -> list of (resp, checker); runs n1 then n2, returns per-unit instructions and
    the Redis calls inside scripts per unit over the n2 run. setup(n) (optional): the same,
    sent before each run and not counted."""
    res = []
    calls = None
    paths = []
    for n in (n1, n2):
        if setup:
            pre = setup(n)
            check(srv.c.pipe([c for c, _ in pre]), [w for _, w in pre], setup.__name__)
        cmds = work(n)
        srv.c.call('CONFIG', 'RESETSTAT')
        srv.dump()
        replies = srv.c.pipe([c for c, _ in cmds])
        st = commandstats(srv.c)
        res.append(srv.dump())
        paths.append(srv.last)
        check(replies, [w for _, w in cmds], work.__name__)
        calls = sum(v for k, v in st.items() if k not in OWN) / n
    srv.runs[work.__name__] = paths
    return (res[1] - res[0]) / (n2 - n1), calls


def prim_figures(srv, key, n1, n2, contended_only=False):
    # contended: 8 owners, owner 0 holds, 1..7 queued
    p = Prim(srv, key, 'instr:' + key)
    toks = ['%032x:%x' % (0xabc0 + i, i) for i in range(K)]  # lib/hold.c's owner tokens' shape
    seq = [0] * K
    setup = [p.ev('acq', toks[i], acq_id(i, 0)) for i in range(K)]
    r = srv.c.pipe(setup)
    check(r, [granted] + [queued] * (K - 1), key + ' setup')
    state = {'holder': 0}

    def contended(n):
        out = []
        h = state['holder']
        for _ in range(n):
            out.append((p.ev('rel', toks[h], acq_id(h, seq[h])), one))
            seq[h] += 1
            out.append((p.ev('acq', toks[h], acq_id(h, seq[h])), queued))
            h = (h + 1) % K
        state['holder'] = h
        return out
    ci, calls = measure(srv, contended, n1, n2)
    # the holder now must be the owner whose turn it is: the handovers went round in order
    q = Prim(srv, key, 'instr:' + key)
    h = state['holder']
    chk = srv.c.pipe([q.ev('acq', toks[h], acq_id(h, seq[h]))])[0]
    if not granted(chk):
        fail('%s: after the cycle owner %d does not hold (%r): not FIFO' % (key, h, chk))
    if contended_only:
        return {'calls': calls, 'contended': ci}

    u = Prim(srv, key, 'instr:%s:u' % key)
    useq = [0]

    def uncontended(n):
        out = []
        for _ in range(n):
            a = acq_id(0, useq[0])
            useq[0] += 1
            out.append((u.ev('acq', 'tokU', a), granted))
            out.append((u.ev('rel', 'tokU', a), one))
        return out
    ui, _ = measure(srv, uncontended, n1, n2)

    rn = Prim(srv, key, 'instr:%s:r' % key)
    check(srv.c.pipe([rn.ev('acq', 'tokR', acq_id(0, 0))]), [granted], key + ' renew setup')

    def renew(n):
        return [(rn.ev('renew', 'tokR', acq_id(0, 0)), one) for _ in range(n)]
    ri, _ = measure(srv, renew, n1, n2)
    return {'calls': calls, 'contended': ci, 'uncontended': ui, 'renew': ri}


def floor_figures(srv, n1, n2):
    acq, rel = raw_scripts()
    sa, sr = srv.c.call('SCRIPT', 'LOAD', acq), srv.c.call('SCRIPT', 'LOAD', rel)
    keys = ['instr:raw', 'instr:rawq']
    r = srv.c.pipe([resp('EVALSHA', sa, 2, *keys, 'p%d' % i) for i in range(K)])
    check(r, [one] + [lambda x: x == 0] * (K - 1), 'floor setup')
    state = {'holder': 0}

    def floor(n):
        out = []
        h = state['holder']
        for _ in range(n):
            out.append((resp('EVALSHA', sr, 2, *keys, 'p%d' % h), one))
            out.append((resp('EVALSHA', sa, 2, *keys, 'p%d' % h), lambda x: x == 0))
            h = (h + 1) % K
        state['holder'] = h
        return out
    fi, calls = measure(srv, floor, n1, n2)
    return {'calls': calls, 'contended': fi}


def cond_figures(srv, n1, n2):
    """--cond: the two scripts on the path from rs_cond_signal to the woken waiter holding
    the mutex (issue 14's signal target), each alone, against a PING: the condition's
    `signal` with one live waiter queued per signal, and the waiter's re-acquisition, an
    uncontended `acq` of a mutex its last holder released (the tombstone left)."""
    cs = srv.c.call('SCRIPT', 'LOAD', script_text('cond'))
    ck = ['rs:{instr:cond}:cond', 'rs:{instr:cond}:cond:i']
    m = Prim(srv, 'mutex', 'instr:relock')
    seq = [0]

    def cev(op, tok, acq):
        return resp('EVALSHA', cs, len(ck), *ck, op, tok, acq, LEASE, PREFIX, 'q', MAXW,
                    QLEASE)

    def waits(n):
        seq[0] += n
        return [(cev('wait', 'tok%d' % i, acq_id(i, seq[0])), one) for i in range(n)]

    def signal(n):
        return [(cev('signal', '', ''), one) for _ in range(n)]

    def ping(n):
        return [(resp('PING'), lambda r: r == 'PONG') for _ in range(n)]

    names = [0]

    def released(n):
        out = []
        for i in range(n):
            names[0] += 1
            k = 'rs:{instr:r%d}:mutex' % names[0]
            m.keys = [k, k + ':fence', k + ':q', k + ':qi']
            out.append((m.ev('acq', 'tokW', acq_id(0, 2 * names[0])), granted))
            out.append((m.ev('rel', 'tokW', acq_id(0, 2 * names[0])), one))
        return out

    def relock(n):
        out = []
        for i in range(n):
            k = 'rs:{instr:r%d}:mutex' % (names[0] - n + 1 + i)
            m.keys = [k, k + ':fence', k + ':q', k + ':qi']
            out.append((m.ev('acq', 'tokW', acq_id(0, 2 * (names[0] - n + 1 + i) + 1)),
                        granted))
        return out
    pi, _ = measure(srv, ping, n1, n2)
    si, scalls = measure(srv, signal, n1, n2, setup=waits)
    ri, rcalls = measure(srv, relock, n1, n2, setup=released)
    return {'ping': pi, 'signal': si, 'signal_calls': scalls, 'relock': ri,
            'relock_calls': rcalls}


def cond_main(a):
    t0 = time.time()
    outdir = tempfile.mkdtemp(prefix='rs-instr-')
    srv = Server(outdir, a.server_arg)
    try:
        f = cond_figures(srv, a.n1, a.n2)
    finally:
        srv.stop()
    shutil.rmtree(outdir, ignore_errors=True)
    print('Server instructions on the signal path (callgrind; (I(%d) - I(%d)) / %d), '
          'redis-server %s' % (a.n2, a.n1, a.n2 - a.n1, redis_version()))
    print('%-52s %5s %12s' % ('', 'calls', 'instructions'))
    print('%-52s %5s %12.0f' % ('PING', '', f['ping']))
    print('%-52s %5.1f %12.0f' % ('cond signal, one waiter queued', f['signal_calls'],
                                   f['signal']))
    print('%-52s %5.1f %12.0f' % ('mutex acq, free (the waiter\'s re-acquisition)',
                                   f['relock_calls'], f['relock']))
    print('%.0f s.' % (time.time() - t0))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--n1', type=int, default=400)
    ap.add_argument('--n2', type=int, default=1600)
    ap.add_argument('--only', default='mutex,rwlock,sem')
    ap.add_argument('--script', action='append', default=[], metavar='NAME=FILE',
                    help='measure FILE (a candidate, spliced like the real one) in place of '
                         'primitives/NAME/NAME.lua (NAME: mutex, rwlock, semaphore; cond with --cond)')
    ap.add_argument('--server-arg', action='append', default=[], metavar='ARG',
                    help='one more redis-server argument, e.g. --server-arg=--zset-max-listpack-value '
                         '--server-arg=128 (a diagnosis: the encodings Redis picks by size)')
    ap.add_argument('--keep', action='store_true',
                    help='keep the callgrind dumps (one per run, in order; callgrind_annotate '
                         'reads them) and print their directory')
    ap.add_argument('--breakdown', metavar='PRIM',
                    help='where the contended acquisition of PRIM (mutex, rwlock, sem) and the '
                         'floor\'s instructions go: inclusive costs of the script machinery\'s '
                         'parts and of each command, exclusive costs by function group '
                         '(two servers: a full run and one counting only inside scriptCall)')
    ap.add_argument('--cond', action='store_true',
                    help='the signal path instead: the condition\'s signal with one waiter '
                         'and the woken waiter\'s re-acquisition (a free mutex\'s acq), '
                         'each against a PING')
    ap.add_argument('--redis-server', metavar='PATH', default='redis-server',
                    help='the redis-server binary (default: the one on PATH, Debian\'s); '
                         'bench/instr/redis-syms.sh builds one with symbols')
    a = ap.parse_args()
    REDIS[0] = a.redis_server
    for x in a.script:
        name, _, path = x.partition('=')
        if name not in ('mutex', 'rwlock', 'semaphore', 'cond') or not os.path.isfile(path):
            fail('--script %r: NAME=FILE with NAME mutex, rwlock, semaphore or cond' % x)
        OVERRIDE[name] = os.path.abspath(path)
    if a.n2 <= a.n1 or a.n1 < 1:
        fail('--n2 must be above --n1 >= 1')
    only = [x for x in a.only.split(',') if x]
    for x in only:
        if x not in PRIMS:
            fail('unknown primitive %r (mutex, rwlock, sem)' % x)
    for tool in ('valgrind', 'callgrind_control', REDIS[0]):
        if not shutil.which(tool):
            fail('%s not found (scripts/deps.sh installs it)' % tool)
    if a.cond:
        return cond_main(a)
    if a.breakdown:
        if a.breakdown not in PRIMS:
            fail('--breakdown %r: mutex, rwlock or sem' % a.breakdown)
        return breakdown_main(a)
    t0 = time.time()
    outdir = tempfile.mkdtemp(prefix='rs-instr-')
    srv = Server(outdir, a.server_arg)
    try:
        fl = floor_figures(srv, a.n1, a.n2)
        figs = {k: prim_figures(srv, k, a.n1, a.n2) for k in only}
    finally:
        srv.stop()
    if a.keep:
        print('callgrind dumps kept in %s' % outdir)
    else:
        shutil.rmtree(outdir, ignore_errors=True)

    print('Server instructions (callgrind; (I(%d) - I(%d)) / %d), redis-server %s' %
          (a.n2, a.n1, a.n2 - a.n1, redis_version()))
    hdr = '%-22s %6s %6s %12s %7s %7s %12s %9s' % (
        'primitive', 'calls', 'x mtx', 'contended', 'x floor', 'x mtx', 'uncont pair', 'renew')
    print(hdr)
    print('-' * len(hdr))
    m = figs.get('mutex')
    for k in only:
        f = figs[k]
        xm = ('%6.2f' % (f['calls'] / m['calls'])) if m else '     -'
        xmi = ('%7.2f' % (f['contended'] / m['contended'])) if m else '      -'
        print('%-22s %6.1f %s %12.0f %7.2f %s %12.0f %9.0f' % (
            PRIMS[k]['label'], f['calls'], xm, f['contended'], f['contended'] / fl['contended'],
            xmi, f['uncontended'], f['renew']))
    print('%-22s %6.1f %6s %12.0f %7.2f %7s %12s %9s' % (
        'raw FIFO floor', fl['calls'], '', fl['contended'], 1.0, '', '', ''))
    print('calls: Redis calls inside scripts per contended acquisition; contended: '
          'instructions per')
    print('contended acquisition (rel that hands over + acq that queues); uncont pair: '
          'acq + rel, free;')
    print('renew: one holder renewal. %.0f s.' % (time.time() - t0))
    return 0


def breakdown_main(a):
    """--breakdown PRIM: two servers, the floor's and PRIM's contended cycles in each; the
    first counts everything, the second only inside scriptCall."""
    import breakdown
    t0 = time.time()
    key, n = a.breakdown, a.n2 - a.n1
    res = {}
    for mode, vg in (('full', []),
                     ('inside', ['--collect-atstart=no', '--toggle-collect=scriptCall'])):
        outdir = tempfile.mkdtemp(prefix='rs-instr-')
        srv = Server(outdir, a.server_arg, vg)
        try:
            fl = floor_figures(srv, a.n1, a.n2)
            pf = prim_figures(srv, key, a.n1, a.n2, contended_only=True)
        finally:
            srv.stop()
        res[mode] = {
            'floor': breakdown.per_unit(*breakdown.load(srv.runs['floor']), n),
            key: breakdown.per_unit(*breakdown.load(srv.runs['contended']), n),
            'calls': (fl['calls'], pf['calls']), 'fig': (fl['contended'], pf['contended'])}
        if a.keep:
            print('callgrind dumps (%s run) kept in %s' % (mode, outdir))
        else:
            shutil.rmtree(outdir, ignore_errors=True)
    full, ins = res['full'], res['inside']
    path = shutil.which(REDIS[0]) or REDIS[0]
    print('Where the server instructions go (callgrind; (I(%d) - I(%d)) / %d), %s, '
          'redis-server %s' % (a.n2, a.n1, n, path, redis_version()))
    print('%s contended acquisition: %.0f instructions, %.1f calls; raw floor: %.0f, %.1f calls '
          '(%.2f x)' % (PRIMS[key]['label'], full['fig'][1], full['calls'][1], full['fig'][0],
                        full['calls'][0], full['fig'][1] / full['fig'][0]))
    if not any(fn == 'luaV_execute' for (_, fn) in full[key]['self']):
        print('NOTE: %s has no symbols for Lua\'s internals and the static functions '
              '(luaV_execute not found): they count as "no symbol"; '
              'bench/instr/redis-syms.sh builds a binary with them' % path)
    breakdown.report('raw FIFO floor, rel + acq', full['floor'], ins['floor'],
                     'contended acquisition')
    breakdown.report('%s, rel + acq' % PRIMS[key]['label'], full[key], ins[key],
                     'contended acquisition')
    print('\n%.0f s.' % (time.time() - t0))
    return 0


def redis_version():
    r = subprocess.run([REDIS[0], '--version'], stdout=subprocess.PIPE, text=True)
    m = re.search(r'v=(\S+)', r.stdout)
    return m.group(1) if m else '?'


if __name__ == '__main__':
    sys.exit(main())
