"""Read MSCCL-IR XML the way the runtimes do, into a :class:`~synth.emit.program.Program`.

Two layers, both following ``docs/reference/msccl-xml-spec.md`` (rule ids such as ``A2`` or
``D8`` below refer to its §7); the second is :mod:`.xml_lint`, this module is the first:

* :func:`parse_program` first scans the text with the runtimes' tokenizer rules (§1: no XML
  declaration/DOCTYPE/PI, only space/LF/CR between tags, one tag per line with exactly one space
  before each attribute, double-quoted values, at most 16 attribute slots, node budget per rank...)
  -- a standards-compliant parser accepts much more than the runtimes do -- then builds the tree
  with lxml and reads the attributes with the per-profile requirements of §2 (``exec`` =
  msccl-executor-nccl, ``rccl`` = ROCm/rccl, ``legacy`` = microsoft/msccl). Malformed input raises
  :class:`XmlFormatError` (a :class:`~synth.errors.SynthError`, exit code 2) naming the file, the
  line and the rule.
* :func:`.xml_lint.lint_program` checks the structural rules and hard limits of §2, §5 and §6
  on a parsed program; a violation raises :class:`~synth.errors.VerificationError` (exit code 1).
"""

from __future__ import annotations

import functools
import hashlib
import re
import weakref
from collections import OrderedDict

from lxml import etree

from .. import collector, progress
from ..errors import SynthError
from .program import INSTRUCTIONS, PROTOCOLS, Gpu, Instr, Program, Threadblock
from .runtimes import (
    BUFFERS,
    LEGACY_DEFAULT_MAX_BYTES,
    MAX_ATTR_COUNT,
    MAX_NODES,
    MAX_OFFSET,
    MAX_STR_LEN,
    MAX_SUBS,
    get_profile,
)

_ALGO_KNOWN = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
               "outofplace", "minBytes", "maxBytes")


class XmlFormatError(SynthError):
    """A file the runtimes would refuse to load: ``rule`` is the spec's rule id, ``line`` 1-based."""

    def __init__(self, source: str, line: int | None, rule: str, message: str) -> None:
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: [{rule}] {message}")
        self.source = source
        self.line = line
        self.rule = rule


# --------------------------------------------------------------------------------------------------
# Lexical layer (§1)

_WS = re.compile(r"[ \n\r]*")
_NAME_RE = r"[A-Za-z_][A-Za-z0-9_.:-]{0,253}"
_OPEN = re.compile(
    r"<(?P<name>" + _NAME_RE + r")"
    r'(?P<attrs>(?: ' + _NAME_RE + r'="[^"<&\n\r\t]{0,255}")*)'
    r"(?P<sp> ?)(?P<end>/?>)")
_CLOSE = re.compile(r"</(?P<name>" + _NAME_RE + r")>")
_NAME_FULL = re.compile(_NAME_RE)
_CLOSE_NAME = re.compile(r"[A-Za-z0-9_.:-]*")
_GPU_ID = re.compile(r' id="([^"]*)"')
_INT = re.compile(r"0|-?[1-9][0-9]*")


MAX_DEPTH = 32
"""Element nesting the lexical pass accepts. MSCCL-IR nests four deep (algo, gpu, tb, step); unknown
elements may wrap others, but a file nested deeper than this is not an algorithm file."""


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _found(text: str, i: int) -> str:
    """What stands at ``text[i]``, for "expected X, found Y": a character, or the file's end."""
    if i >= len(text):
        return "the end of the file (is it truncated?)"
    c = text[i]
    return {"\n": "a line break", "\r": "a line break", "\t": "a TAB", " ": "a space"}.get(c, repr(c))


def _cut(value: str, limit: int = 40) -> str:
    """An attribute value or name for a message: at most ``limit`` characters."""
    return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"


def _diagnose_tag(text: str, pos: int, source: str) -> XmlFormatError:
    """Say precisely why the start tag at ``pos`` is not in the runtimes' accepted form."""
    line = _line(text, pos)

    def fail(rule: str, msg: str) -> XmlFormatError:
        return XmlFormatError(source, line, rule, msg)

    n = len(text)
    i = pos + 1
    j = i
    while j < n and text[j] not in ' >/\n\r\t="\'<':
        j += 1
    name = text[i:j]
    if not name:
        return fail("A2", f"expected an element name after '<', found {_found(text, j)}")
    if not _NAME_FULL.fullmatch(name):
        return fail("A3" if len(name) > 254 else "A2", f"invalid element name '{_cut(name)}'")
    i = j
    while True:
        if i >= n:
            return XmlFormatError(source, _line(text, n), "A2",
                                  f"expected '>' to end the start tag <{name}> begun on line {line}, "
                                  f"found {_found(text, n)}")
        c = text[i]
        if c == ">":
            break
        if c == "/":
            if i + 1 < n and text[i + 1] == ">":
                break
            return fail("A2", f"'/' must be followed by '>' in <{name}>")
        if c in "\n\r":
            return fail("A2", f"<{name}> spans lines: all attributes of a tag must be on one line "
                              "(a newline between attributes is fatal to the runtime tokenizer)")
        if c == "\t":
            return fail("A1", f"TAB inside <{name}>: separate attributes with exactly one space")
        if c != " ":
            return fail("A2", f"expected one space before the next attribute of <{name}>, got '{c}'")
        i += 1
        c = text[i] if i < n else ""
        if c == " ":
            return fail("A2", f"more than one space before an attribute of <{name}> "
                              "(each extra space is a phantom attribute slot)")
        if c in ("/", ">"):
            continue  # a single space before '/>' or '>' (tolerated, one phantom slot)
        k = i
        while k < n and text[k] not in '= \t\n\r/>"\'<':
            k += 1
        key = text[i:k]
        if not key:
            return fail("A2", f"expected an attribute name in <{name}>, found {_found(text, k)}")
        if not _NAME_FULL.fullmatch(key):
            return fail("A3" if len(key) > 254 else "A2",
                        f"invalid attribute name '{_cut(key)}' in <{name}>")
        if k >= n or text[k] != "=":
            rest = text[k:k + 3]
            if rest[:1] in (" ", "\t") and "=" in rest:
                return fail("A2", f"no whitespace is allowed around '=' (attribute '{key}')")
            return fail("A2", f"expected '=' and a value after attribute '{key}' of <{name}>, "
                              f"found {_found(text, k)}")
        k += 1
        q = text[k] if k < n else ""
        if q == "'":
            return fail("A2", f"attribute '{key}': values must be in double quotes (the runtime reads "
                              "a value up to the next '\"')")
        if q != '"':
            return fail("A2", f"expected '\"' to open the value of attribute '{key}' of <{name}> "
                              f"(no whitespace after '='), found {_found(text, k)}")
        close = text.find('"', k + 1)
        if close < 0:
            return XmlFormatError(source, _line(text, n), "A2",
                                  f"expected '\"' to close the value of attribute '{key}' of "
                                  f"<{name}> (line {line}), found {_found(text, n)}")
        value = text[k + 1:close]
        if len(value) > MAX_STR_LEN:
            return fail("A3", f"value of '{key}' is {len(value)} characters (max {MAX_STR_LEN}, "
                              "MAX_STR_LEN: the runtime's value buffer is not bounds-checked)")
        if any(ch in value for ch in "\n\r\t"):
            return fail("A2", f"value of '{key}' contains a line break or TAB")
        if "&" in value or "<" in value:
            return fail("A2", f"value of '{key}' contains '&' or '<' (the runtime does no entity "
                              "decoding)")
        i = close + 1
    return fail("A2", f"malformed start tag <{name}>")


def check_lexical(text: str, source: str = "<xml>", profile: str = "exec") -> None:
    """Reject what the runtimes' hand-written tokenizer rejects (or silently mis-reads), §1."""
    get_profile(profile)
    n = len(text)
    pos = 0
    stack: list[list] = []          # [name, children, start pos]
    root_seen = False
    ngpus_el = 0
    gpu_nodes: list[list] = []      # [id text, tb+step count, pos]
    cur_gpu: list | None = None
    ws = _WS.match
    open_match = _OPEN.match
    while True:
        pos = ws(text, pos).end()
        if pos >= n:
            break
        c = text[pos]
        if c != "<":
            line = _line(text, pos)
            if c == "\t":
                raise XmlFormatError(source, line, "A1", "TAB between tags: only space, LF and CR "
                                     "may separate tags (indent with spaces)")
            if c == "\ufeff":
                raise XmlFormatError(source, line, "A1", "byte-order mark before the first tag")
            raise XmlFormatError(source, line, "A1", f"text content is not allowed (found {c!r} "
                                 "where a tag must start)")
        if text.startswith("<!--", pos):
            end = text.find("-->", pos + 4)
            if end < 0:
                raise XmlFormatError(source, _line(text, n), "A2",
                                     f"expected '-->' to close the comment opened on line "
                                     f"{_line(text, pos)}, found {_found(text, n)}")
            pos = end + 3
            continue
        if text.startswith("<?", pos):
            raise XmlFormatError(source, _line(text, pos), "A1",
                                 "XML declaration or processing instruction: the runtimes' "
                                 "tokenizer fails on '<?' (write with xml_declaration=False)")
        if text.startswith("<!", pos):
            raise XmlFormatError(source, _line(text, pos), "A1",
                                 "DOCTYPE/CDATA/markup declaration is not accepted by the runtimes")
        if text.startswith("</", pos):
            m = _CLOSE.match(text, pos)
            if m is None:
                want = f"</{stack[-1][0]}>" if stack else "a start tag"
                end = text.find(">", pos)
                if end >= 0 and "\n" not in text[pos:end]:
                    got = repr(_cut(text[pos:end + 1]))
                else:
                    stop = _CLOSE_NAME.match(text, pos + 2).end()
                    got = f"{_cut(text[pos:stop])!r} and then {_found(text, stop)}"
                raise XmlFormatError(source, _line(text, pos), "A2",
                                     f"expected {want} (an end tag is exactly </name>, no space "
                                     f"before '>'), found {got}")
            name = m["name"]
            if not stack or stack[-1][0] != name:
                expected = f"</{stack[-1][0]}>" if stack else "no end tag"
                raise XmlFormatError(source, _line(text, pos), "A2",
                                     f"end tag </{name}> does not match (expected {expected})")
            closed = stack.pop()
            if closed[0] == "gpu" and len(stack) == 1:
                cur_gpu = None
            pos = m.end()
            continue
        m = open_match(text, pos)
        if m is None:
            raise _diagnose_tag(text, pos, source)
        name = m["name"]
        attrs = m["attrs"]
        slots = attrs.count('"') // 2 + (1 if m["sp"] else 0)
        if slots > MAX_ATTR_COUNT:
            raise XmlFormatError(source, _line(text, pos), "A3",
                                 f"<{name}> has {slots} attribute slots (max {MAX_ATTR_COUNT}, "
                                 "MAX_ATTR_COUNT): the runtime silently drops the rest")
        if not stack:
            if root_seen:
                raise XmlFormatError(source, _line(text, pos), "A2",
                                     f"second top-level element <{name}>")
            root_seen = True
            if name != "algo":
                hint = (" (the meta-parser of EXEC/RCCL reads only the first element)"
                        if profile in ("exec", "rccl") else "")
                raise XmlFormatError(source, _line(text, pos), "A1",
                                     f"the first element must be <algo>, got <{name}>{hint}")
        else:
            parent = stack[-1]
            parent[1] += 1
            if parent[1] > MAX_SUBS:
                raise XmlFormatError(source, _line(text, parent[2]), "A3",
                                     f"<{parent[0]}> has more than {MAX_SUBS} children (MAX_SUBS)")
            depth = len(stack)
            if depth == 1 and name == "gpu":
                ngpus_el += 1
                gm = _GPU_ID.search(attrs)
                cur_gpu = [gm.group(1) if gm else "?", 0, pos]
                gpu_nodes.append(cur_gpu)
            elif cur_gpu is not None and ((depth == 2 and name == "tb")
                                          or (depth == 3 and name == "step")):
                cur_gpu[1] += 1
        if m["end"] == ">":
            if len(stack) >= MAX_DEPTH:
                raise XmlFormatError(source, _line(text, pos), "A2",
                                     f"<{name}> is nested {len(stack) + 1} elements deep; "
                                     f"MSCCL-IR nests 4 (algo, gpu, tb, step), synth reads at most "
                                     f"{MAX_DEPTH}")
            stack.append([name, 0, pos])
        pos = m.end()
    if stack:
        raise XmlFormatError(source, _line(text, n), "A2",
                             f"expected </{stack[-1][0]}> to close <{stack[-1][0]}> opened on line "
                             f"{_line(text, stack[-1][2])}, found {_found(text, n)}")
    if not root_seen:
        raise XmlFormatError(source, None, "A1", "no <algo> element")
    for gid, count, gpos in gpu_nodes:
        total = 1 + ngpus_el + count
        if total > MAX_NODES - 1:
            raise XmlFormatError(source, _line(text, gpos), "A3",
                                 f"rank {gid} needs {total} XML nodes (1 algo + {ngpus_el} gpu + "
                                 f"{count} tb/step); the tokenizer stores at most {MAX_NODES - 1} "
                                 f"(MAX_NODES={MAX_NODES})")


# --------------------------------------------------------------------------------------------------
# Tree layer (§2)

_PARSER = etree.XMLParser(remove_comments=True, resolve_entities=False, huge_tree=True,
                          no_network=True, remove_pis=False)


_PARSED: OrderedDict[tuple[str, str], tuple[int, Program]] = OrderedDict()
_PARSED_TEXT_KEPT = 128 * 2**20
"""Characters of text whose parsed programs are kept at most (the oldest go first)."""
_ALIVE: weakref.WeakValueDictionary[tuple[str, str], Program] = weakref.WeakValueDictionary()
"""Every program parsed (or remembered) while something else still holds it, by the same key:
one :data:`_PARSED` let go of is found here as long as a caller keeps it (the scorer keeps every
program it times), so it is not parsed again, and nothing is held for it. Measured on ``synth
solve --topo dgx_h100 --nodes 64 --coll allgather``, whose files are 31-124 MB: the solving
process parsed one 62 MB file three times and another twice (29 s), the kept text's bound having
let them go while the scorer held them."""


def _remembered(parse):
    """Parse each text once: a solve parses a file where it is verified, where the program model
    times it and again before it is written. The result depends on the text and the profile only
    (``source`` names the file in errors, and errors are not remembered), and a Program is
    immutable, so the same object serves every caller -- which also lets the program model reuse
    what it built for it (:func:`synth.timing.program_machine.layout_of`).

    The parse runs with the cyclic collector paused (:mod:`synth.collector`): it allocates a
    program's objects and makes no cyclic garbage, and in a process holding millions of live
    objects the collections its allocations set off traced them all for nothing. A proof's parse
    was already paused (:func:`synth.emit.verify_text`); the others were not: on ``synth solve
    --topo dgx_a100 --nodes 8 --coll allgather`` the same ten parses of 1-15 MB files took 6.4 s
    of the solving process inside proofs and 11.2 s outside them."""
    @functools.wraps(parse)
    def remembered(text: str, source: str = "<xml>", profile: str = "exec") -> Program:
        key = (hashlib.sha256(text.encode()).hexdigest(), profile)
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
            return hit[1]
        alive = _ALIVE.get(key)
        if alive is not None:
            _keep_parsed(key, len(text), alive)
            return alive
        with collector.paused():    # a program's objects, by the hundred thousand: see below
            program = parse(text, source, profile)
        _keep_parsed(key, len(text), program)
        return program
    return remembered


def _keep_parsed(key: tuple[str, str], size: int, program: Program) -> None:
    _PARSED[key] = (size, program)
    _ALIVE[key] = program
    _PARSED.move_to_end(key)
    while sum(n for n, _ in _PARSED.values()) > _PARSED_TEXT_KEPT and len(_PARSED) > 1:
        _PARSED.popitem(last=False)


def remember_parsed(text: str, profile: str, program: Program) -> None:
    """``program`` as :func:`parse_program`'s answer for ``text`` under ``profile``, parsed by that
    very function elsewhere (a worker process, :mod:`synth.select.compile_ahead`), so this process
    need not parse it again: unpickling a 14,336-transfer program took 0.11 s where parsing its
    3.4 MB text took 0.65 s."""
    _keep_parsed((hashlib.sha256(text.encode()).hexdigest(), profile), len(text), program)


@progress.spanned("parse")
@_remembered
def parse_program(text: str, source: str = "<xml>", profile: str = "exec") -> Program:
    """Parse one algorithm file as runtime ``profile`` (``exec``, ``rccl`` or ``legacy``) would."""
    prof = get_profile(profile)
    check_lexical(text, source, profile)
    try:
        root = etree.fromstring(text.encode("utf-8"), _PARSER)
    except etree.XMLSyntaxError as e:
        line = e.lineno if getattr(e, "lineno", None) else None
        raise XmlFormatError(source, line, "A2", f"not well-formed XML: {e.msg}") from None

    def fail(el, rule: str, msg: str) -> XmlFormatError:
        return XmlFormatError(source, el.sourceline, rule, msg)

    def get_int(el, key: str, required: bool = True, default: int = 0) -> int:
        v = el.get(key)
        if v is None:
            if required:
                raise fail(el, "A5", f"<{el.tag}> lacks required attribute '{key}'")
            return default
        if not _INT.fullmatch(v):
            raise fail(el, "A4", f"attribute {key}=\"{_cut(v)}\" of <{el.tag}> must be a plain "
                                 "decimal integer (the runtime's strtol honours 0/0x prefixes and "
                                 "reads junk as 0)")
        if len(v) > 20:
            raise fail(el, "A4", f"attribute {key}=\"{_cut(v)}\" of <{el.tag}> does not fit in 64 "
                                 "bits")
        n = int(v)
        if not -(1 << 63) <= n < (1 << 63):
            raise fail(el, "A4", f"attribute {key}=\"{v}\" of <{el.tag}> does not fit in 64 bits")
        return n

    a = root.attrib
    for key in prof.required_algo:
        if key not in a:
            raise fail(root, "A5", f"<algo> lacks '{key}', required by the {profile} runtime")
    proto = a["proto"]
    if proto not in PROTOCOLS:
        raise fail(root, "B1", f"proto=\"{proto}\" is not one of {', '.join(PROTOCOLS)}")
    coll = a["coll"]
    if coll not in prof.colls:
        hint = ""
        if coll in ("reduce_scatter", "reducescatter"):
            hint = (" (EXEC/RCCL spell it 'reducescatter', LEGACY 'reduce_scatter')")
        raise fail(root, "B1", f"coll=\"{coll}\" is not known to the {profile} runtime{hint} "
                               f"(known: {', '.join(prof.colls)})")
    inplace = get_int(root, "inplace")
    if inplace not in (0, 1):
        raise fail(root, "B4", f"inplace must be 0 or 1, got {inplace}")
    if profile == "legacy":
        outofplace = 0 if inplace else 1
        min_bytes = get_int(root, "minBytes", False, 0)
        max_bytes = get_int(root, "maxBytes", False, LEGACY_DEFAULT_MAX_BYTES)
        nthreads = a.get("nthreads")
        if nthreads is not None:
            nt = get_int(root, "nthreads")
            if nt <= 0 or nt % 32:
                raise fail(root, "B6", f"nthreads={nt} must be a positive multiple of 32")
        if coll == "alltoall" and a.get("name") == "2D":
            raise fail(root, "B6", "an alltoall named '2D' is replaced by LEGACY's built-in 2-D "
                                   "all-to-all; choose another name")
    else:
        outofplace = get_int(root, "outofplace")
        if outofplace not in (0, 1):
            raise fail(root, "B4", f"outofplace must be 0 or 1, got {outofplace}")
        min_bytes = get_int(root, "minBytes")
        max_bytes = get_int(root, "maxBytes")
    extra = tuple((k, v) for k, v in a.items() if k not in _ALGO_KNOWN
                  and not (profile == "legacy" and k == "outofplace"))

    gpus = []
    for g in root:
        if g.tag != "gpu":
            continue  # unknown elements are skipped with their subtree (§1 rule 9)
        gid = get_int(g, "id")
        ic, oc, sc = get_int(g, "i_chunks"), get_int(g, "o_chunks"), get_int(g, "s_chunks")
        if sc < 0:
            raise fail(g, "C2", f"s_chunks={sc} is negative")
        for what, count in (("i_chunks", ic), ("o_chunks", oc), ("s_chunks", sc)):
            if count > MAX_OFFSET + 1:     # the interpreter would hold a cell per chunk
                raise fail(g, "C2", f"{what}={count} is above {MAX_OFFSET + 1}: steps address "
                                    f"chunks by int16 offsets (at most {MAX_OFFSET}, spec §6), so "
                                    "no program can use them")
        tbs = []
        for t in g:
            if t.tag != "tb":
                continue
            tid, send = get_int(t, "id"), get_int(t, "send")
            recv, chan = get_int(t, "recv"), get_int(t, "chan")
            steps = []
            for st in t:
                if st.tag != "step":
                    if st.tag == "op":
                        raise fail(st, "A5", "<op> (the new MSCCLang format) is not understood by "
                                             "any runtime: emit <step> elements (old format)")
                    continue
                steps.append(_read_step(st, fail, get_int))
            tbs.append(Threadblock(id=tid, send=send, recv=recv, chan=chan, steps=tuple(steps)))
        gpus.append(Gpu(id=gid, i_chunks=ic, o_chunks=oc, s_chunks=sc, tbs=tuple(tbs)))

    return Program(name=a.get("name", ""), coll=coll, proto=proto,
                   nchannels=get_int(root, "nchannels"), nchunksperloop=get_int(root, "nchunksperloop"),
                   ngpus=get_int(root, "ngpus"), inplace=inplace, outofplace=outofplace,
                   min_bytes=min_bytes, max_bytes=max_bytes, gpus=tuple(gpus), extra=extra)


_STEP_INTS = ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")
_INT_CACHE: dict[str, int] = {}
"""Integer texts already validated as plain decimal (values repeat a lot in large files)."""


def _read_step(st, fail, get_int) -> Instr:
    get = st.get
    cache = _INT_CACHE
    vals = []
    for key in _STEP_INTS:
        v = get(key)
        n = cache.get(v) if v is not None else None
        if n is None:
            n = get_int(st, key)  # validates; raises with the right rule
            if len(cache) < 1 << 16:
                cache[v] = n
        vals.append(n)
    s, srcoff, dstoff, cnt, depid, deps, hasdep = vals
    typ = get("type")
    if typ is None:
        raise fail(st, "A5", "<step> lacks required attribute 'type'")
    if typ not in INSTRUCTIONS:
        if typ == "ra":
            raise fail(st, "D2", "step type 'ra' is parsed by LEGACY but not implemented by any "
                                 "kernel (the block aborts)")
        raise fail(st, "D2", f"unknown step type '{typ}' (known: {', '.join(INSTRUCTIONS)})")
    srcbuf, dstbuf = get("srcbuf"), get("dstbuf")
    for key, buf in (("srcbuf", srcbuf), ("dstbuf", dstbuf)):
        if buf is None:
            raise fail(st, "A5", f"<step> lacks required attribute '{key}' (all ten attributes are "
                                 "required on every step, nop included)")
        if buf not in BUFFERS:
            raise fail(st, "D3", f"{key}=\"{buf}\" must be one of i, o, s")
    if typ != "nop" and hasdep not in (0, 1):
        raise fail(st, "D7", f"hasdep={hasdep} must be 0 or 1")
    return Instr(s=s, type=typ, srcbuf=srcbuf, srcoff=srcoff, dstbuf=dstbuf, dstoff=dstoff, cnt=cnt,
                 depid=depid, deps=deps, hasdep=hasdep)


def read_program(path, profile: str = "exec") -> Program:
    """Parse an algorithm file from disk (SynthError if it cannot be read)."""
    from ..files import read_input
    return parse_program(read_input(path, "XML file"), str(path), profile)
