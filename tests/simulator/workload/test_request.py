"""Chain ids, re-blocking and the Request object."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from simulator.workload.request import (
    Request,
    chain,
    chain_extend,
    content_keys,
    reblock,
    scope_key,
)


def ids_of(local: list[int], scope: int = 7) -> np.ndarray:
    return chain(content_keys(scope, np.asarray(local, dtype=np.int64)))


def test_chain_identifies_whole_prefixes() -> None:
    a = ids_of([1, 2, 3, 4, 5])
    b = ids_of([1, 2, 3, 9, 5])
    assert (a[:3] == b[:3]).all()
    assert not (a[3:] == b[3:]).any()  # block 4 has the same content, but not the same prefix
    assert len(set(a.tolist())) == 5
    assert ids_of([2, 3])[0] != a[1]  # the same block at another position differs


def test_chain_scopes_and_extension() -> None:
    assert not (ids_of([1, 2], scope=1) == ids_of([1, 2], scope=2)).any()
    keys = content_keys(3, np.arange(50, dtype=np.int64))
    head, sums = chain_extend(keys[:20], 0, 0)
    tail, _ = chain_extend(keys[20:], 20, int(sums[-1]))
    assert (np.concatenate([head, tail]) == chain(keys)).all()
    assert not chain(keys).flags.writeable


def test_ids_do_not_depend_on_the_process() -> None:
    code = (
        "import numpy as np; from simulator.workload.request import chain, content_keys, "
        "scope_key; print(chain(content_keys(scope_key('t', 'x'), np.arange(4))).tolist())"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    expected = chain(content_keys(scope_key("t", "x"), np.arange(4))).tolist()
    assert runs == {f"{expected}\n"}


@pytest.mark.parametrize(
    ("dst", "expected_blocks"), [(64, 31), (256, 7), (512, 3), (1920, 1), (2048, 0)]
)
def test_reblock_multiples_take_every_kth_id(dst: int, expected_blocks: int) -> None:
    src = ids_of(list(range(31)))  # 31 full 64-token blocks: 1,984 tokens
    out = reblock(src, 64, dst, prompt_tokens=2000)
    assert len(out) == expected_blocks
    k = dst // 64
    assert list(out) == [int(src[(i + 1) * k - 1]) for i in range(expected_blocks)]
    assert all(isinstance(x, int) for x in out)


def test_reblock_covers_only_full_source_blocks_and_the_prompt() -> None:
    src = ids_of(list(range(10)))
    assert len(reblock(src, 64, 256, prompt_tokens=640)) == 2  # 640 tokens: 2 of 256
    assert len(reblock(src, 64, 256, prompt_tokens=300)) == 1  # ids beyond the prompt ignored
    assert reblock(src[:0], 64, 256, prompt_tokens=10_000) == ()


def test_reblock_to_a_finer_or_odd_size_keeps_prefix_semantics() -> None:
    a = ids_of([1, 2, 3, 4])  # 512-token blocks
    b = ids_of([1, 2, 3, 8])
    fa, fb = reblock(a, 512, 256, 2048), reblock(b, 512, 256, 2048)
    assert len(fa) == 8
    assert fa[:6] == fb[:6]
    assert not set(fa[6:]) & set(fb[6:])
    assert len(set(fa)) == 8
    oa, ob = reblock(a, 512, 768, 2048), reblock(b, 512, 768, 2048)
    assert len(oa) == 2  # 1,536 of 2,048 tokens
    assert oa == ob  # both 768-token blocks end inside the shared first 1,536 tokens
    assert reblock(a, 512, 1024, 2048)[0] == int(a[1])  # a multiple reuses the source id


def test_request_is_a_light_identity_keyed_object() -> None:
    r = Request(0, 1, 0, 100, 10, ids_of([1]), 64, 0.0)
    twin = Request(0, 1, 0, 100, 10, ids_of([1]), 64, 0.0)
    assert r != twin
    assert len({r, twin}) == 2
    assert not hasattr(r, "__dict__")
    assert r.engine_blocks(64) == (int(r.block_hashes[0]),)
    with pytest.raises(AttributeError):
        r.prompt_tokens = 5  # type: ignore[misc]
