"""The format-aware mutator of the served fuzz benchmark (devtools/upload_mutants.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from devtools import fuzz_codec, upload_mutants


@pytest.fixture(scope="module")
def seeds() -> list[bytes]:
    return [path.read_bytes() for image_format in fuzz_codec.FORMATS for path in fuzz_codec.seeds(image_format)]


def test_mutants_are_reproducible_and_differ(seeds):
    assert upload_mutants.mutant(seeds, 3, 17) == upload_mutants.mutant(seeds, 3, 17)
    assert upload_mutants.mutant(seeds, 3, 17).data != upload_mutants.mutant(seeds, 3, 18).data


@pytest.mark.parametrize("image_format", fuzz_codec.FORMATS)
def test_each_formats_length_and_size_fields_are_found(image_format):
    data = fuzz_codec.seeds(image_format)[0].read_bytes()
    fields = upload_mutants.FIELDS[image_format](data)
    expected = {
        "png": {"IHDR length", "IHDR width", "IDAT length", "IEND length"},
        "jpeg": {"SOF width", "SOF height", "0xDA length"},
        "webp": {"RIFF size"},
        "heic": {"ftyp size", "meta size", "ispe width"},
        "avif": {"ftyp size", "meta size", "ispe height"},
    }[image_format]
    assert expected <= {field.what for field in fields}
    for field in fields:
        assert field.offset >= 0 and field.offset + field.size <= len(data)


def test_a_run_mixes_every_format_and_kind_of_mutation(seeds):
    cases = [upload_mutants.mutant(seeds, 1, index) for index in range(600)]
    assert set(Counter(case.format for case in cases)) == set(fuzz_codec.FORMATS)
    kinds = Counter(part.split("(")[0] for case in cases for part in case.mutations.split("+"))
    assert {"field", "bit_flips", "truncate", "insert_run", "delete_run", "repeat_run", "splice"} <= set(kinds)
    assert sum(case.data != seeds[case.seed_index] for case in cases) > 550
