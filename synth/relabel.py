"""Concurrent groups on the same machine: solve one, relabel its files for the others.

``synth solve --concurrent stride:8`` solves every group of the partition, each on the machine
it sees while all of them run (:func:`synth.groups.concurrent_group`). On a symmetric machine
those machines are copies of one another: the same ranks, links, switch ports, NICs and figures,
told apart only by the name (``dgx1x8.g-stride-8+3.c-stride-8``), the description and the meta
keys that say which group it is. The solve never reads the description or those meta keys, and
reads the name only as a label (messages, file names, the schedule's ``topology`` and ``hash``)
or through suffixes of the whole machine (:func:`synth.sketches.library.base_topology_name`),
which every group shares. So two such groups get the same files but for the name, and all but
the first are produced here from the first's, instead of solved again (one dgx1 x8 group is
about five CPU minutes).

What a member gets, and why each file is right:

* schedule JSON: the representative's :class:`~synth.schedule.Schedule`, read back (its text
  must be exactly what ``to_json`` writes) with ``topology`` and ``hash`` set to the member's,
  then verified again on the member's topology (:func:`synth.verify.verify`);
* MSCCL-IR XML and the range report: the text with the representative's name replaced by the
  member's, every XML proven by the interpreter (:func:`synth.emit.verify_text`, against the
  member's schedule and the range's own options) before anything is written: a text identical
  to the one the representative proved shares that proof (:func:`_proof` says why that is one),
  any other is proven again;
* rank maps: the member's own (:func:`synth.groups.rank_maps`), never relabelled;
* the manifest: written by the normal writer (:func:`synth.outputs.commit`), all files or none.

A whole-name replace is safe only where the name occurs as a whole word: every occurrence must
be bounded by characters a name does not continue with, the member's name must occur nowhere
before, and no file or note may carry the representative's description, output folder (a note
on files synth did not write there) or the name of a switch, port or NIC the member's machine
calls otherwise. Where any of that fails, or the files are of a kind not relabelled here
(MSCCL++ plans), :class:`NotRelabelled` says why and the caller solves the group as usual.

Cost (2 shared cores): relabelling and verifying again one dgx1 x2 stride:8 allreduce group took
0.05-0.12 s against 3.6 s for the encodings alone of the group it came from, before the program
model ranked them; one dgx1 x8 group took 7.9-9.3 s (load ~5.5) against about 190 s wall per
group solved (25 min 30 s for all 8 without relabelling, 3 min 48 s with it, byte-identical), when
every member's XML was proven again; since identical texts share their proof the whole command's
interpreter time fell from 44.6 to 8.2 s (``benchmarks/speed.py``, case ``concurrent``).
benchmarks/concurrent_reuse.py times whole runs.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

from .emit import XmlOptions, verify_text
from .groups import GROUP_NAME, Group, rank_maps
from .outputs import Written
from .outputs.layout import MAP_FOLDER, SCHEDULE_FOLDER, XML_FOLDERS
from .outputs.schedule_json import _name_part
from .schedule import Schedule
from .select.candidates import Candidate
from .select.ranking import range_options
from .solve import SolveOutcome
from .topology import Topology
from .verify import verify

PER_GROUP_META = frozenset({"group", "global_ranks", "partition"})
"""Meta keys that say which group a machine is (:func:`synth.groups.induced`,
:func:`synth.groups.concurrent_group`), not what it is."""

REUSE = True
"""Relabel a concurrent group's files from an earlier group on the same machine. False: solve
every group (tests compare the two; nothing else sets it)."""


class NotRelabelled(Exception):
    """The representative's files cannot be relabelled for a member; the message says why."""


def resource_names(topology: Topology) -> list[str]:
    """The names of ``topology``'s switches, ports and NICs, sorted (a port and the NIC behind it
    share one)."""
    return sorted({*(sw.name for sw in topology.switches),
                   *(p.name for sw in topology.switches for p in sw.ports),
                   *(n.name for n in topology.nics)})


def machine_key(topology: Topology) -> str:
    """What a solve can depend on, as canonical JSON: ``to_dict`` without the name, description,
    sources and per-group meta, plus the name with its group part (``.g-<label>``) left out. Two
    groups with one key are solved alike; a topology not named as a group gets a key of its own.

    Switch, port and NIC names are replaced by their place in :func:`resource_names`: the groups
    of ``stride:8`` on a DGX-1 sit behind different NICs (``ib0@k``, ``ib1@k``), alike in all
    else. Two machines with one key then differ by a renaming of those resources that keeps
    which names are equal and how they sort, so code that matches or orders resources by name
    treats both alike; :func:`relabel` refuses files that print such a name."""
    data = topology.to_dict()
    for k in ("name", "description", "sources"):
        data.pop(k)
    place = {name: f"#{i}" for i, name in enumerate(resource_names(topology))}
    for sw in data["switches"]:
        sw["name"] = place[sw["name"]]
        for p in sw["ports"]:
            p["name"] = place[p["name"]]
    for n in data["nics"]:
        n["name"] = place[n["name"]]
    data["meta"] = {k: v for k, v in data["meta"].items() if k not in PER_GROUP_META}
    m = GROUP_NAME.fullmatch(topology.name)
    data["name_shape"] = ([m.group("base"), m.group("part")] if m else [topology.name])
    data["group_name"] = m is not None
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=repr)


def same_machine(a: Topology, b: Topology) -> bool:
    """True when ``a`` and ``b`` are group machines equal up to the name (:func:`machine_key`)."""
    return GROUP_NAME.fullmatch(a.name) is not None and machine_key(a) == machine_key(b)


class _Names:
    """Replace a topology's name (and its file-name form) with another's, whole words only."""

    def __init__(self, old: str, new: str) -> None:
        self.table = {old: new, _name_part(old): _name_part(new)}
        self.back = {v: k for k, v in self.table.items()}
        if len(self.back) != len(self.table):
            raise NotRelabelled(f"the names of {old} and {new} have the same file-name form")

    @staticmethod
    def _pattern(words: list[str]) -> re.Pattern[str]:
        alt = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
        return re.compile(rf"(?<![A-Za-z0-9])(?:{alt})(?![A-Za-z0-9])")

    def __call__(self, text: str) -> str:
        """``text`` with every whole occurrence of the old name replaced; NotRelabelled where an
        occurrence is part of a longer word or the new name is already there."""
        # only the names that occur are searched for: most files (every XML) name no topology,
        # and the regular expressions over megabytes of text were most of relabelling's time
        present = [word for word in self.table if word in text]
        for word in present:
            if text.count(word) != len(self._pattern([word]).findall(text)):
                raise NotRelabelled(f"'{word}' occurs inside a longer word")
        for word in self.back:
            if word in text:
                raise NotRelabelled(f"'{word}' already occurs in the representative's files")
        if not present:
            return text
        return self._pattern(present).sub(lambda m: self.table[m.group()], text)


def relabel(done: SolveOutcome, rep: Topology, member: Topology, group: Group,
            out_dir: Path) -> tuple[SolveOutcome, dict[str, str]]:
    """The representative's outcome ``done`` (solved on ``rep``) as the member's (``member``,
    ``group``, into ``out_dir``), with the member's rank maps (path relative to ``out_dir`` ->
    text), every schedule verified again and every XML proven (:func:`_proof`); nothing is
    written (pass both to :func:`synth.outputs.commit`). NotRelabelled where the files cannot be
    relabelled. The result's ``seconds`` are this call's (what the member's files took), not the
    solve's."""
    start = time.perf_counter()
    if not same_machine(rep, member):
        raise NotRelabelled(f"{member.name} is not the machine {rep.name} is")
    written = done.written
    if written.out_dir is None or written.pending:
        raise NotRelabelled("the representative's files were not committed")
    rep_dir = written.out_dir
    names = _Names(rep.name, member.name)
    renamed = [a for a, b in zip(resource_names(rep), resource_names(member), strict=True)
               if a != b]
    markers = [(rep.description, "description"), (str(rep_dir), "output folder"),
               *((name, f"switch, port or NIC {name}") for name in renamed)]
    for rel, text in [*done.texts.items(), *(("a note", n) for n in done.written.notes)]:
        for marker, what in markers:
            if marker and marker in text:
                raise NotRelabelled(f"{rel} names the representative's {what}")
    xml_folders = set(XML_FOLDERS.values())
    schedules = _schedules(done, rep, member)
    texts: dict[str, str] = {}
    for rel, text in done.texts.items():
        folder = Path(rel).parts[0]
        if folder == SCHEDULE_FOLDER:
            new = schedules[rel]
        elif folder in xml_folders or folder == "reports":
            new = names(text)
        else:
            raise NotRelabelled(f"{rel}: files under {folder}/ are not relabelled")
        texts[names(rel)] = new
    if len(texts) != len(done.texts):
        raise NotRelabelled("two files would get one name")
    result = done.result
    moved = {id(c): replace(c, schedule=_moved(c.schedule, rep, member)) for c in result.candidates}

    def cand(c: Candidate | None) -> Candidate | None:
        return None if c is None else moved.get(id(c)) or replace(
            c, schedule=_moved(c.schedule, rep, member))

    def path(f: str | None) -> str | None:
        return None if f is None else str(out_dir / names(str(Path(f).relative_to(rep_dir))))

    ranges, reports, proven = [], [], set()
    for r, f, oop_f in zip(written.ranges, written.range_files, written.oop_files, strict=True):
        c = cand(r.candidate)
        r2 = replace(r, candidate=c, text=None if r.text is None else names(r.text),
                     oop=None if r.oop is None else replace(r.oop, text=names(r.oop.text)))
        if c is not None and done.xml is not None and f is not None and r2.text is not None:
            opts = range_options(done.xml, r.lo, r.hi, r.instances, r.proto)
            got = _proof(r2.text, r.text, r.reports, c.schedule, opts)
            proven.add(str(Path(f).relative_to(rep_dir)))
            r2 = replace(r2, reports=tuple(got))
            if r2.oop is not None and oop_f is not None:
                assert r.oop is not None
                oop_got = _proof(r2.oop.text, r.oop.text, r.oop.reports, c.schedule,
                                 replace(opts, inplace=False))
                proven.add(str(Path(oop_f).relative_to(rep_dir)))
                r2 = replace(r2, oop=replace(r2.oop, reports=tuple(oop_got)))
            seen = {x.mode for x in reports}
            reports.extend(x for x in (*r2.reports, *(r2.oop.reports if r2.oop else ()))
                           if x.mode not in seen)
        ranges.append(r2)
    unproven = [rel for rel in done.texts if Path(rel).parts[0] in xml_folders
                and rel not in proven]
    if unproven:
        raise NotRelabelled(f"{unproven[0]} is no range's file: it would not be proven again")
    new_written = Written(
        files=[out_dir / rel for rel in texts], xml_reports=reports,
        notes=[names(n) for n in written.notes], plan_reports=[], ranges=ranges,
        range_files=[path(f) for f in written.range_files],
        oop_files=[path(f) for f in written.oop_files], winners_by=written.winners_by,
        pending=texts, out_dir=out_dir, key=names(written.key),
        legacy=[replace(e, path=names(e.path)) for e in written.legacy])
    new_result = replace(result, topology=member, best=cand(result.best),
                         candidates=[cand(c) for c in result.candidates],
                         notes=[names(n) for n in result.notes], files=[],
                         seconds=time.perf_counter() - start)
    rank_files = {f"{MAP_FOLDER}/{name}": text for name, text in
                  rank_maps(new_written.files, group).items()}
    return replace(done, result=new_result, written=new_written, texts=dict(texts)), rank_files


def _proof(text: str, rep_text: str, rep_reports: tuple, schedule: Schedule,
           options: XmlOptions) -> tuple:
    """The interpreter's reports for a member's XML ``text``: the representative's own proof
    when the text is byte-for-byte the one it proved (``rep_text``), else a new proof.

    Why sharing is a proof: :func:`synth.emit.verify_text` reads nothing but the text, the
    schedule's collective and the options' profile and instance count, and a member's schedule
    is the representative's with only the topology's name and hash changed (:func:`_moved`), so
    the same text gets the same verdict. The files of symmetric groups name no topology (a
    dgx1 x8 stride:8 allreduce's 14 XML files are identical across its 8 groups), and proving
    each again took half of that command's time."""
    if text == rep_text and rep_reports:
        return tuple(rep_reports)
    _, got = verify_text(text, schedule, options)
    return tuple(got)


def _moved(schedule: Schedule, rep: Topology, member: Topology) -> Schedule:
    """``schedule`` (made for ``rep``) naming ``member``."""
    if schedule.topology != rep.name or schedule.topology_hash != rep.content_hash:
        raise NotRelabelled(f"a candidate names {schedule.topology}, not {rep.name}")
    return replace(schedule, topology=member.name, topology_hash=member.content_hash)


def _schedules(done: SolveOutcome, rep: Topology, member: Topology) -> dict[str, str]:
    """Each written schedule's text for ``member``: read back, renamed, verified on ``member``."""
    out: dict[str, str] = {}
    for rel, text in done.texts.items():
        if Path(rel).parts[0] != SCHEDULE_FOLDER:
            continue
        schedule = Schedule.from_json(text, rel)
        if schedule.to_json() != text:
            raise NotRelabelled(f"{rel} does not read back to the same text")
        moved = _moved(schedule, rep, member)
        verify(moved, member)
        out[rel] = moved.to_json()
    return out
