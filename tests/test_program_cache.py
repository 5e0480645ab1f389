"""cached_times: program-model times remembered by content, in the process and on disk."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from synth.timing import program as pm
from synth.timing.program import (
    CACHE_STATS,
    TimingStore,
    cached_times,
    program_model,
    program_times_us,
)
from synth.topology_io import load_topology

DATA = Path(__file__).parent / "data" / "msccl_ndv5"
SIZES = [1024, 2**20, 2**25]


@pytest.fixture
def fresh(monkeypatch):
    """An empty in-process memory (as in a new process) and zeroed counters."""
    monkeypatch.setattr(pm, "_TIMES", {})
    for k in ("memory", "disk", "simulated"):
        monkeypatch.setattr(CACHE_STATS, k, 0)


def _file(name: str = "ndv5__ag-32m-1g.xml") -> str:
    return (DATA / name).read_text()


def test_cached_times_are_the_simulated_times_and_each_size_runs_once(fresh):
    from synth.emit.xml_parse import parse_program

    topo = load_topology("dgx_h100")
    text = _file()
    program = parse_program(text)
    want = program_times_us(program, topo, SIZES)
    assert cached_times(text, topo, SIZES) == want
    assert CACHE_STATS.simulated == 3 and CACHE_STATS.memory == 0
    # again, in another order with a repeat: all from memory, same floats
    again = cached_times(text, topo, [SIZES[2], SIZES[0], SIZES[2]])
    assert again == [want[2], want[0], want[2]]
    assert CACHE_STATS.simulated == 3 and CACHE_STATS.memory == 2   # a repeat counts once


def test_the_key_is_the_content_the_machine_and_the_figures(fresh):
    topo = load_topology("dgx_h100")
    text = _file()
    model = program_model(topo, "Simple")
    base = cached_times(text, topo, [2**20], model=model)
    # the same text in another string object: a hit
    assert cached_times("".join(list(text)), topo, [2**20], model=model) == base
    assert CACHE_STATS.simulated == 1
    # other figures (what a calibration changes): a miss, and another time
    slower = replace(model, step_us=model.step_us + 1.0)
    assert cached_times(text, topo, [2**20], model=slower)[0] > base[0]
    # another machine with the same rank count: a miss
    a100 = load_topology("dgx_a100")
    cached_times(text, a100, [2**20], model=model)
    # another profile: a miss
    cached_times(text, topo, [2**20], model=model, profile="rccl")
    assert CACHE_STATS.simulated == 4


def test_a_text_with_other_byte_bounds_has_the_same_times(fresh):
    """``minBytes``/``maxBytes`` only say where a runtime selects a file: a range's file (the
    scorer's compile with its bounds set) is answered from the compile's times, which are the
    times simulating it finds; any other change to the text is another key."""
    from synth.emit.xml_parse import parse_program
    from synth.timing.program_store import text_digest

    topo = load_topology("dgx_h100")
    text = _file()
    head = text[:text.index(">")]
    assert 'minBytes="' in head and 'maxBytes="' in head
    ranged = text.replace(head, head.replace('minBytes="', 'minBytes="1').replace(
        'maxBytes="', 'maxBytes="9'), 1)
    assert ranged != text and text_digest(ranged) == text_digest(text)
    model = program_model(topo, "Simple")
    base = cached_times(text, topo, SIZES, model=model)
    assert cached_times(ranged, topo, SIZES, model=model) == base
    assert CACHE_STATS.simulated == 3 and CACHE_STATS.memory == 3
    # what the cache answered is what simulating the ranged file finds, to the bit
    assert program_times_us(parse_program(ranged), topo, SIZES, model=model) == base
    # the same attributes anywhere else, or any other attribute of the tag, count
    other = text.replace('proto="Simple"', 'proto="LL128"', 1)
    assert other != text and text_digest(other) != text_digest(text)
    body = text.replace("\n", '\n<!-- minBytes="1" -->\n', 2)
    assert text_digest(body) != text_digest(text)


def test_store_keeps_times_across_processes(fresh, tmp_path, monkeypatch):
    topo = load_topology("dgx_h100")
    text = _file("ndv5__ag-1m.xml")
    store = TimingStore.beside(tmp_path)
    sizes = [1024, 2**20, 2**26]
    first = cached_times(text, topo, sizes, store=store)
    files = list((tmp_path / "timings").rglob("*.json"))
    assert len(files) == 1
    monkeypatch.setattr(pm, "_TIMES", {})      # a new process: only the disk remembers
    assert cached_times(text, topo, sizes, store=store) == first
    assert CACHE_STATS.disk == 3 and CACHE_STATS.simulated == 3
    # a size the store does not hold is simulated and added to the same entry
    cached_times(text, topo, [4096], store=store)
    assert CACHE_STATS.simulated == 4
    assert set(json.loads(files[0].read_text())["times"]) == {"1024", "4096", "1048576",
                                                              "67108864"}


def test_store_keeps_a_deadlock_as_inf(tmp_path):
    """A size the file cannot run at is remembered too (``inf``, written as "inf" in JSON)."""
    store = TimingStore(tmp_path)
    store.put("ab" * 32, {1024: 7.25, 2**30: math.inf})
    assert store.get("ab" * 32) == {1024: 7.25, 2**30: math.inf}
    assert store.get("cd" * 32) == {}


def test_unreadable_store_entries_are_misses(fresh, tmp_path):
    topo = load_topology("dgx_h100")
    text = _file()
    store = TimingStore.beside(tmp_path)
    want = cached_times(text, topo, [2**20], store=store)
    (entry,) = (tmp_path / "timings").rglob("*.json")
    entry.write_text("{not json")
    pm._TIMES.clear()
    assert cached_times(text, topo, [2**20], store=store) == want
    assert CACHE_STATS.simulated == 2


def test_a_program_still_held_elsewhere_is_not_parsed_again(monkeypatch):
    """Past the bound on kept text, parse_program lets its oldest programs go, but one a caller
    still holds (the scorer keeps every program it times) is found by its text and not parsed
    again; one nobody holds is."""
    import gc

    from synth.emit import xml_parse

    monkeypatch.setattr(xml_parse, "_PARSED_TEXT_KEPT", 1)
    monkeypatch.setattr(xml_parse, "_PARSED", type(xml_parse._PARSED)())
    text = _file()
    other = text.replace('name="', 'name="other ', 1)
    held = xml_parse.parse_program(text, "a.xml")
    xml_parse.parse_program(other, "b.xml")        # lets ``held`` go from the kept ones
    assert len(xml_parse._PARSED) == 1
    parsed = []
    check = xml_parse.check_lexical
    monkeypatch.setattr(xml_parse, "check_lexical", lambda *a: parsed.append(a) or check(*a))
    assert xml_parse.parse_program(text, "a.xml") is held
    assert not parsed
    xml_parse.parse_program(text + " ", "c.xml")    # another text: lets ``other`` go
    gc.collect()
    xml_parse.parse_program(other, "b.xml")         # nobody held it: parsed again
    assert len(parsed) == 2


def test_a_text_is_parsed_once_per_profile():
    """parse_program remembers its result by the text's content: the solve's verification, the
    program model and the final timing share one Program (and the model's layout built for it);
    an error is not remembered, and another profile is another parse."""
    from synth.emit.xml_parse import XmlFormatError, parse_program

    text = _file()
    first = parse_program(text, "a.xml")
    assert parse_program("".join(list(text)), "b.xml") is first
    assert parse_program(text, "a.xml", "rccl") is not first
    bad = text.replace("<algo", "<algo ", 1)
    for _ in range(2):
        with pytest.raises(XmlFormatError):
            parse_program(bad, "bad.xml")
