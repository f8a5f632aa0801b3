"""The coded size of an HEVC or AV1 stream, read from its sequence parameter set or sequence header."""

from __future__ import annotations

from .container import _HEVC_SPS, _HVCC_HEADER, _OBU_SEQUENCE_HEADER, CODING_BLOCK, HeifError, Item, _item_bytes, _Meta, _property, _u

# --------------------------------------------------------------------------- coded sizes


class _Bits:
    """A big-endian bit reader over a few dozen bytes (a parameter set or sequence header)."""

    def __init__(self, data: bytes, what: str) -> None:
        self.value, self.left, self.what = int.from_bytes(data, "big"), 8 * len(data), what

    def read(self, count: int) -> int:
        if count > self.left:
            raise HeifError(f"corrupt {self.what}: it ends early")
        self.left -= count
        return (self.value >> self.left) & ((1 << count) - 1)

    def leading_zeros(self, most: int) -> int:
        zeros = 0
        while not self.read(1):
            zeros += 1
            if zeros > most:
                raise HeifError(f"corrupt {self.what}: a variable-length number is too long")
        return zeros

    def ue(self) -> int:
        """Exp-Golomb ue(v) (HEVC)."""
        zeros = self.leading_zeros(31)
        return (1 << zeros) - 1 + self.read(zeros)

    def uvlc(self) -> int:
        """AV1's uvlc()."""
        zeros = self.leading_zeros(32)
        return (1 << 32) - 1 if zeros >= 32 else (1 << zeros) - 1 + self.read(zeros)


def hevc_coded_size(hvcc: bytes) -> tuple[int, int]:
    """(pic_width_in_luma_samples, pic_height_in_luma_samples) of the first SPS of an ``hvcC`` box's payload."""
    what = "HEIC (HEVC configuration)"
    if len(hvcc) < _HVCC_HEADER + 1:
        raise HeifError(f"corrupt {what}: too short")
    position, arrays = _HVCC_HEADER + 1, hvcc[_HVCC_HEADER]
    for _ in range(arrays):
        nal_type = _u(hvcc, position, 1, len(hvcc), what) & 0x3F
        count = _u(hvcc, position + 1, 2, len(hvcc), what)
        position += 3
        for _ in range(count):
            length = _u(hvcc, position, 2, len(hvcc), what)
            nal = hvcc[position + 2 : position + 2 + length]
            position += 2 + length
            if nal_type == _HEVC_SPS:
                return _hevc_sps_size(nal[2:258].replace(b"\x00\x00\x03", b"\x00\x00"))
    raise HeifError(f"corrupt {what}: no sequence parameter set")


def _hevc_sps_size(rbsp: bytes) -> tuple[int, int]:
    bits = _Bits(rbsp, "HEIC (HEVC sequence parameter set)")
    bits.read(4)  # sps_video_parameter_set_id
    sub_layers = bits.read(3)  # sps_max_sub_layers_minus1
    bits.read(1)
    bits.read(96)  # general profile, tier, flags and level
    present = [(bits.read(1), bits.read(1)) for _ in range(sub_layers)]
    if sub_layers:
        bits.read(2 * (8 - sub_layers))
    for profile, level in present:
        bits.read(88 * profile + 8 * level)
    bits.ue()  # sps_seq_parameter_set_id
    if bits.ue() == 3:  # chroma_format_idc 4:4:4
        bits.read(1)  # separate_colour_plane_flag
    return bits.ue(), bits.ue()


def av1_coded_size(obus: bytes) -> tuple[int, int] | None:
    """(max_frame_width, max_frame_height) of the first sequence header OBU in ``obus``; None if there is none."""
    what = "AVIF (AV1 OBUs)"
    position, count = 0, 0
    while position < len(obus) and count < 64:
        count += 1
        header = obus[position]
        kind, extension, has_size = (header >> 3) & 0xF, header & 0x4, header & 0x2
        position += 2 if extension else 1
        if has_size:
            size, shift = 0, 0
            while True:
                byte = _u(obus, position, 1, len(obus), what)
                position += 1
                size |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
                if shift >= 56:
                    raise HeifError(f"corrupt {what}: an OBU size is too long")
        else:
            size = len(obus) - position
        if kind == _OBU_SEQUENCE_HEADER:
            return _av1_sequence_size(obus[position : position + min(size, 256)])
        position += size
    return None


def _av1_sequence_size(header: bytes) -> tuple[int, int]:
    bits = _Bits(header, "AVIF (AV1 sequence header)")
    bits.read(4)  # seq_profile, still_picture
    if bits.read(1):  # reduced_still_picture_header
        bits.read(5)  # seq_level_idx[0]
    else:
        buffer_delay_bits, decoder_model = 0, False
        if bits.read(1):  # timing_info_present_flag
            bits.read(64)  # num_units_in_display_tick, time_scale
            if bits.read(1):  # equal_picture_interval
                bits.uvlc()
            decoder_model = bool(bits.read(1))
            if decoder_model:
                buffer_delay_bits = bits.read(5) + 1
                bits.read(32 + 5 + 5)
        initial_display_delay = bits.read(1)
        for _ in range(bits.read(5) + 1):  # operating points
            bits.read(12)  # operating_point_idc
            if bits.read(5) > 7:  # seq_level_idx
                bits.read(1)  # seq_tier
            if decoder_model and bits.read(1):
                bits.read(2 * buffer_delay_bits + 1)
            if initial_display_delay and bits.read(1):
                bits.read(4)
    width_bits, height_bits = bits.read(4) + 1, bits.read(4) + 1
    return bits.read(width_bits) + 1, bits.read(height_bits) + 1


def _coded_size(data: bytes, found: _Meta, item: Item, name: str) -> tuple[int, int]:
    """The size the item's coded stream says, read from its decoder configuration (or, for AV1, its data)."""
    if item.type == b"hvc1":
        config = _property(data, found, item, b"hvcC")
        if config is None:
            raise HeifError(f"corrupt {name}: HEVC item {item.id} has no decoder configuration (hvcC)")
        return hevc_coded_size(data[config.start : config.end])
    config = _property(data, found, item, b"av1C")
    if config is None:
        raise HeifError(f"corrupt {name}: AV1 item {item.id} has no decoder configuration (av1C)")
    size = av1_coded_size(data[config.start + 4 : config.end]) or av1_coded_size(_item_bytes(data, found, item, 4096, name))
    if size is None:
        raise HeifError(f"corrupt {name}: AV1 item {item.id} has no sequence header")
    return size


def _round_up(value: int) -> int:
    return -(-value // CODING_BLOCK) * CODING_BLOCK
