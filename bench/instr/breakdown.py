"""breakdown.py - where a workload's server instructions go, from two callgrind dumps.

Used by instr.py --breakdown (see its docstring). Every figure here is per unit:
(cost in the N2 run's dump - cost in the N1 run's dump) / (N2 - N1), per function (its
exclusive cost, "self") and per call edge (caller -> callee: the callee's inclusive cost for
the calls made from that caller, and how many calls).

Two tables:

  boundaries  inclusive costs read from call edges, which are exact (no recursion sums):
              EVALSHA dispatch and client I/O (the total minus evalShaCommand), the EVALSHA
              command around the script (evalGenericCommand minus luaCallFunction: script
              lookup, scriptPrepareForRun, scriptResetRun), luaCallFunction around lua_pcall
              (KEYS/ARGV tables, the reply's conversion, the GC step), the script's run
              (lua_pcall) split into redis.call's glue (luaRedisCallCommand and
              luaRedisPCallCommand minus scriptCall: the arguments' and the reply's
              conversions), the commands inside scriptCall (ACL and cluster checks, call()'s
              bookkeeping, each XCommand's own inclusive cost and count), redis.sha1hex, and
              what is left: the Lua code of the script itself.

  groups      exclusive costs summed by function-name groups (GROUPS below), split in two by a
              second server run with --collect-atstart=no --toggle-collect=scriptCall
              (callgrind counts only inside scriptCall there): inside the Redis commands that
              scripts call (that run) and outside them (the full run minus that one).

Function names need symbols: Debian's redis-server is stripped, and its .dynsym names only
the exported functions, so the Lua VM's hidden functions and the static ones of
script_lua.c fall into "no symbol" (bench/instr/redis-syms.sh builds a binary with them).
"""
import os
import re

# (group, object regex or None, function-name regex): the first match wins.
LUA_VM = (r'luaV_execute|luaV_gettable|luaV_settable|luaV_lessthan|luaV_equalval|luaD_\w+|'
          r'luaF_\w+|luaT_\w+|luaG_\w+|luaE_\w+|callTM|callTMres|call_binTM|call_orderTM|'
          r'get_compTM|Arith|traceexec|lessthan|lessequal|seterrorobj|restore_stack_limit|'
          r'correctstack|growCI|adjust_varargs|tryfuncTM|callrethooks|resetstack|'
          r'luaV_\w+arith|currentpc|currentline|getcurrenv|index2adr|luaA_\w+|'
          r'f_call|f_Ccall|luaMaskCountHook|stack_init|freestack|preinit_state')
LUA_STR = (r'luaS_\w+|luaO_\w+|str_\w+|luaV_concat|luaV_tonumber|luaV_tostring|l_strcmp|'
           r'luaB_tonumber|luaB_tostring|luaL_addlstring|luaL_addstring|luaL_addvalue|'
           r'luaL_buffinit|luaL_prepbuffer|luaL_pushresult|emptybuffer|adjuststack|addquoted|'
           r'addintlen|scanformat|match|do_match|singlematch|matchbalance|max_expand|'
           r'min_expand|start_capture|end_capture|match_capture|classend|match_class|'
           r'matchbracketclass|push_onecapture|push_captures|gmatch_aux|gmatch|add_s|'
           r'add_value|newlstr|lmemfind|posrelat|pushstr|lua_pushfstring|lua_pushvfstring|'
           r'lua_concat|lua_tolstring|lua_pushlstring|lua_pushstring|lua_tonumber|'
           r'lua_tointeger|lua_isnumber|lua_isstring|lua_pushnumber|lua_pushinteger|'
           r'luaL_checklstring|luaL_optlstring|luaL_checknumber|luaL_checkinteger|'
           r'luaL_optinteger|luaL_optnumber|fpconv_\w+|strbuf_\w+')
LUA_TAB = (r'luaH_\w+|luaC_\w+|luaM_\w+|hashnum|mainposition|arrayindex|findindex|'
           r'computesizes|countint|numusearray|numusehash|setarrayvector|setnodevector|'
           r'resize|rehash|getfreepos|newkey|reallymarkobject|marktmu|traversetable|'
           r'traverseproto|traverseclosure|checkstacksizes|traversestack|propagatemark|'
           r'propagateall|iscleared|cleartable|freeobj|sweeplist|checkSizes|GCTM|markmt|'
           r'markroot|remarkupvals|atomic|singlestep|removeentry|l_alloc|lua_createtable|'
           r'lua_newtable|lua_rawseti|lua_rawgeti|lua_rawset|lua_rawget|lua_settable|'
           r'lua_gettable|lua_setfield|lua_getfield|lua_next|lua_objlen|lua_gc|'
           r'tinsert|tremove|tconcat|getn|setn|auxsort|sort|aux_getn|maxn|foreachi|foreach|'
           r'luaB_next|luaB_ipairs|luaB_pairs|ipairsaux|luaB_unpack|luaB_select|luaB_rawget|'
           r'luaB_rawset|luaB_setmetatable|luaB_getmetatable|luaB_rawequal|'
           r'lua_enablereadonlytable|lua_isreadonlytable')
SCRIPT = (r'eval\w*|luaCallFunction|luaRedis\w+|luaReplyToRedisReply|redisProtocolToLuaType'
          r'\w*|luaCreateArray|luaSetGlobalArray|luaArgsToRedisArgv|freeLuaRedisArgv|'
          r'luaPush\w+|luaSaveOnRegistry|luaGetFromRegistry|luaCreateFunction|luaError\w*|'
          r'luaExtractErrorInformation|luaSetErrorMetatable|luaSetTableProtection\w*|'
          r'luaGetStringSds|luaProtectedTableError|luaNewIndexAllowList|luaSetAllowList\w*|'
          r'luaRaiseError|luaLdb\w*|ldb\w+|script\w+|callReply\w*|parseReply|'
          r'parse(Bulk|Array|Int|Null|Bool|Double|Map|Set|Attributes|VerbatimString|'
          r'BigNumber|SimpleString|Error)\w*|sha1hex|SHA1\w+|getCommandFlags|'
          r'lua_pcall|lua_call|lua_settop|lua_gettop|lua_pushvalue|lua_insert|lua_remove|'
          r'lua_replace|lua_type|lua_toboolean|lua_pushnil|lua_pushboolean|lua_checkstack|'
          r'lua_pushcclosure|lua_pushlightuserdata|lua_touserdata|lua_sethook|lua_getinfo|'
          r'lua_getstack|lua_error|lua_typename|lua_xmove|lua_rawequal|luaL_\w+|lua_\w+')
LUA_LIB = r'luaB_\w+|math_\w+|bit_\w+|tobit|barg|mp_\w+|json_\w+|luaopen_\w+'
GROUPS = [
    ('allocator (jemalloc, zmalloc)', r'libjemalloc', None),
    ('allocator (jemalloc, zmalloc)', None,
     r'(je_\w+|malloc|free|realloc|calloc|posix_memalign|cfree|z(try)?(malloc|free|realloc|'
     r'calloc)\w*|zmalloc_size|zstrdup|extend_to_usable|malloc_usable_size|sdsAllocSize|'
     r'__libc_\w+|_int_\w+)'),
    ('Lua VM (interpreter, calls)', r'redis', LUA_VM),
    ('Lua strings (luaS, luaO, string lib, tonumber, ..)', r'redis', LUA_STR),
    ('Lua tables, GC, memory (luaH, luaC, luaM)', r'redis', LUA_TAB),
    ('Lua base, math, bit libraries (type, select, unpack, ..)', r'redis', LUA_LIB),
    ('script machinery (EVALSHA, redis.call glue, conversions, Lua C API)', r'redis',
     SCRIPT),
    ('functions named *Command (processCommand, command bodies)', r'redis', r'\w+Command'),
    ('Redis data structures (dict, listpack, zset, sds, object)', r'redis',
     r'(dict|lp|listpack|ziplist|zzl|zsl|zset|hash|sds|createObject|createString\w*|'
     r'decrRefCount|incrRefCount|object|tryObjectEncoding|getLongLong\w*|string2\w+|'
     r'll2string|ull2string|ld2string|siphash|stringmatch|intset|rax|lookupKey\w*|dbAdd|'
     r'dbSet\w*|db\w+|setKey|setExpire|getExpire|removeExpire|keyIsExpired|expireIfNeeded|'
     r'checkType|genericSetKey|signalModifiedKey|touchWatchedKey|trackingInvalidate\w*|'
     r'notifyKeyspaceEvent|mstime|ustime|getMonotonic\w*|rdbSave\w*|lookup\w+)\w*'),
    ('libc (memcpy, strlen, snprintf, ..)', r'libc\.so', None),
    ('no symbol (static or hidden functions)', None, r'0x[0-9a-f]+'),
    ('the rest of redis-server (networking, call(), ACL, ..)', r'redis', None),
    ('other objects (kernel vdso, ld.so, ssl, ..)', None, None),
]
_RULES = [(g, re.compile(o) if o else None, re.compile('^(' + f + ')$') if f else None)
          for g, o, f in GROUPS]
GROUP_ORDER = []
for _g, _, _ in GROUPS:
    if _g not in GROUP_ORDER:
        GROUP_ORDER.append(_g)


def group_of(obj, fn):
    fn = fn.split("'")[0]  # callgrind's recursion levels: call'2 is call() inside a script
    for g, o, f in _RULES:
        if o and not o.search(obj):
            continue
        if f and not f.match(fn):
            continue
        return g
    return GROUP_ORDER[-1]


class Dump:
    """One callgrind output file: self cost per (object, function), and per call edge
    ((object, caller), (object, callee)) the calls' inclusive cost and their count."""

    def __init__(self, path, names):
        """names: the compressed names' table, shared by every dump of one process (callgrind
        spells a name out once, in the first dump that uses it): parse them in order."""
        self.self = {}
        self.edge = {}
        self.ncalls = {}
        self.total = 0

        def name(kind, v):
            m = re.match(r'\((\d+)\)(?:\s(.*))?$', v)
            if not m:
                return v
            k = (kind, m.group(1))
            if m.group(2) is not None:
                names[k] = m.group(2)
            return names.get(k, v)
        ob, fn, cob, cfn = '?', None, None, None
        in_call = None
        with open(path, errors='replace') as f:
            for line in f:
                c = line[:1]
                if c.isdigit() or c in '+-*':
                    t = line.split()
                    cost = int(t[1]) if len(t) > 1 else 0
                    if in_call is not None:  # calls=0: a call still active at the dump
                        e = ((ob, fn), (cob or ob, cfn))
                        self.edge[e] = self.edge.get(e, 0) + cost
                        self.ncalls[e] = self.ncalls.get(e, 0) + in_call
                        in_call, cob = None, None
                    else:
                        k = (ob, fn)
                        self.self[k] = self.self.get(k, 0) + cost
                    continue
                key, _, v = line.rstrip('\n').partition('=')
                if key == 'ob':
                    ob = os.path.basename(name('ob', v))
                elif key == 'fn':
                    fn = name('fn', v)
                elif key == 'cob':
                    cob = os.path.basename(name('ob', v))
                elif key == 'cfn':
                    cfn = name('fn', v)
                elif key == 'calls':
                    in_call = int(v.split()[0])
                elif key in ('fl', 'fi', 'fe', 'cfi', 'cfl'):
                    name('fl', v)
                elif line.startswith('totals:') or line.startswith('summary:'):
                    self.total = int(line.split()[1])


def load(paths):
    """The callgrind dumps at paths (cg.out.K files of one process), parsed with every
    earlier dump of that process for the names."""
    want = {os.path.abspath(p) for p in paths}
    d = os.path.dirname(os.path.abspath(paths[0]))
    nums = sorted(int(f.rsplit('.', 1)[1]) for f in os.listdir(d)
                  if re.match(r'^cg\.out\.\d+$', f))
    names, out = {}, {}
    for k in nums:
        p = os.path.join(d, 'cg.out.%d' % k)
        out[p] = Dump(p, names)
        if p in want and len([x for x in out if x in want]) == len(want):
            break
    return [out[os.path.abspath(p)] for p in paths]


def per_unit(d1, d2, n):
    """(N2 dump - N1 dump) / n for self costs, edges and call counts."""
    def diff(a, b):
        out = {}
        for k in set(a) | set(b):
            out[k] = (b.get(k, 0) - a.get(k, 0)) / n
        return out
    return {'total': (d2.total - d1.total) / n, 'self': diff(d1.self, d2.self),
            'edge': diff(d1.edge, d2.edge), 'ncalls': diff(d1.ncalls, d2.ncalls)}


def into(u, callee, caller=None):
    """Inclusive cost and count of the calls into callee (from caller, or from any other
    function): exact, since an edge's cost is that of the calls along it."""
    cost = cnt = 0.0
    for (a, b), v in u['edge'].items():
        if b[1] == callee and a[1].split("'")[0] != callee and \
                (caller is None or a[1] == caller):
            cost += v
            cnt += u['ncalls'].get((a, b), 0)
    return cost, cnt


def commands(u):
    """The Redis commands that call() ran, other than the EVALSHA itself: name -> (cost,
    calls), per unit."""
    out = {}
    for (a, b), v in u['edge'].items():
        if re.match(r"^call('\d+)?$", a[1]) and re.match(r'^\w+Command$', b[1]) and \
                b[1] != 'evalShaCommand':
            c, n = out.get(b[1], (0.0, 0.0))
            out[b[1]] = (c + v, n + u['ncalls'].get((a, b), 0))
    # INFO, CONFIG: this program's own, as many in both runs
    return {k: x for k, x in out.items() if x[1] >= 0.05}


def groups(u):
    out = {g: 0.0 for g in GROUP_ORDER}
    for (ob, fn), v in u['self'].items():
        out[group_of(ob, fn or '?')] += v
    return out


def top(u, n=15):
    return sorted(((v, ob, fn) for (ob, fn), v in u['self'].items()), reverse=True)[:n]


def _row(label, v, tot, note=''):
    return '| %s | %s | %.1f%% |%s' % (label, '{:,.0f}'.format(v), 100.0 * v / tot if tot else 0,
                                       (' ' + note + ' |') if note else '')


def report(title, full, inside, unit):
    """Prints the two tables (markdown) for one workload; full and inside are per_unit()
    results of the full run and of the run that counts only inside scriptCall."""
    tot = full['total']
    print('\n#### %s: %s instructions per %s' % (title, '{:,.0f}'.format(tot), unit))
    evalsha, nev = into(full, 'evalShaCommand')
    generic, _ = into(full, 'evalGenericCommand', 'evalShaCommand')
    lcf, _ = into(full, 'luaCallFunction')
    pcall, _ = into(full, 'lua_pcall', 'luaCallFunction')
    sc, nsc = into(full, 'scriptCall')
    glue = 0.0
    named = any(fn == 'luaRedisCallCommand' for (_, fn) in full['self'])
    for f in ('luaRedisCallCommand', 'luaRedisPCallCommand'):
        glue += into(full, f)[0]
    sha, nsha = into(full, 'luaRedisSha1hexCommand')
    cmds = commands(full)
    cmd_total = sum(c for c, _ in cmds.values())
    print('\nInclusive costs (call edges of the full run), per %s; %.1f EVALSHAs, %.1f Redis '
          'calls inside scripts (scriptCall):\n' % (unit, nev, nsc))
    print('| part | instructions | share |')
    print('|---|---|---|')
    print(_row('client I/O, RESP parsing, processCommand, replies (all but evalShaCommand)',
               tot - evalsha, tot))
    print(_row('EVALSHA around the script (evalGenericCommand + evalShaCommand - '
               'luaCallFunction)', evalsha - lcf, tot))
    print(_row('luaCallFunction around lua_pcall (KEYS/ARGV tables, reply conversion, GC step)',
               lcf - pcall, tot))
    if named:
        print(_row('redis.call glue (luaRedisCallCommand - scriptCall: argument and reply '
                   'conversion)', glue - sc, tot))
    else:
        print('| redis.call glue | (no symbol: luaRedisCallCommand is static; counted in the '
              'script\'s Lua below) | |')
    print(_row('scriptCall around the commands (ACL, cluster checks, call() bookkeeping)',
               sc - cmd_total, tot))
    print(_row('the Redis commands themselves (%.1f calls; below)' %
               sum(n for _, n in cmds.values()), cmd_total, tot))
    if nsha:
        print(_row('redis.sha1hex (%.1f calls)' % nsha, sha, tot))
    lua_own = pcall - (glue if named else sc) - (sha if nsha else 0)
    print(_row('the script\'s own Lua (lua_pcall minus the above)', lua_own, tot))
    if cmds:
        print('\n| command | calls | instructions (inclusive) | per call |')
        print('|---|---|---|---|')
        for k, (c, n) in sorted(cmds.items(), key=lambda x: -x[1][0]):
            print('| %s | %.1f | %s | %s |' % (k, n, '{:,.0f}'.format(c),
                                              '{:,.0f}'.format(c / n) if n else '-'))
    gf, gi = groups(full), groups(inside)
    go = {g: gf[g] - gi[g] for g in gf}
    print('\nExclusive costs by function group, per %s: outside the Redis commands scripts '
          'call (the full run minus the next column), inside them (a run counting only inside '
          'scriptCall: --collect-atstart=no --toggle-collect=scriptCall), total:\n' % unit)
    print('| group | outside scriptCall | inside scriptCall | total | share |')
    print('|---|---|---|---|---|')
    for g in GROUP_ORDER:
        if abs(gf[g]) < 0.5 and abs(go[g]) < 0.5:
            continue
        print('| %s | %s | %s | %s | %.1f%% |' % (
            g, '{:,.0f}'.format(go[g]), '{:,.0f}'.format(gi[g]),
            '{:,.0f}'.format(gf[g]), 100.0 * gf[g] / tot if tot else 0))
    print('| total | %s | %s | %s | 100%% |' % ('{:,.0f}'.format(tot - inside['total']),
                                               '{:,.0f}'.format(inside['total']),
                                               '{:,.0f}'.format(tot)))
    print('\nThe functions with the most exclusive instructions (full run):\n')
    print('| function | object | instructions | share | group |')
    print('|---|---|---|---|---|')
    for v, ob, fn in top(full):
        print('| %s | %s | %s | %.1f%% | %s |' % (fn, ob, '{:,.0f}'.format(v),
                                               100.0 * v / tot if tot else 0,
                                               group_of(ob, fn or '?')))
