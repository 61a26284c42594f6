"""Block maps of mmsparse plans, for block-sparse kernels (FlashInfer's BSR wrappers, Flex masks).

`block_map(passes, shape, block_q, block_k)` marks block (query block, key block) of a head slot
when the plan computes at least one (query, key) pair in it, for blocks of block_q x block_k
positions. A kernel run on those blocks computes a SUPERSET of the plan's pairs (every pair of a
marked block that its own causal mask keeps), so its recall is measured from its own output.

Input: per pass the arrays `mmsparse.Plan.pass_arrays(p)` returns (the host plan's CSR records as
numpy views: query runs, tiles, tile masks, spans, strided spans, columns; include/mmsparse/plan.h),
and the plan's shape (batch, heads, q_len, kv_len, tile_rows). The work is tile-level and
vectorised: each key record of a tile is cut at key-block edges into pieces, each piece is paired
with the query blocks its tile's rows fall in (one or two for the usual tiles), and the mask rule
(src/core/mask_rule.h) is evaluated on the pair's ranges of rows and keys, never row by row.

Exact (the marked blocks are those holding a plan pair) when the masks are causal and minimum
distance only, or when a window, its sink or a periodic band is present and the tile's rows inside
a query block and the piece's keys are contiguous (natural query order, spans and columns). Else
(strided keys or phase-major query orders under a window or band, and masks on token arrays:
same-media, modality pairs, bidirectional media, which are not evaluated) the rows' and keys' hulls
are used, which can only add blocks.
"""

import numpy as np

MASK_FIELDS = ("causal", "window", "window_sink", "min_distance", "period", "band", "same_media",
               "modality_pairs", "media_bidirectional")
# Records per chunk of tiles: bounds the temporary arrays (about 100 bytes per piece and cell).
CHUNK_RECORDS = 1 << 22
_FAR = np.int64(1) << 62  # a distance bound no position reaches


def _exclusive_cumsum(counts):
    out = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=out[1:])
    return out


def _expand(counts):
    """(owner, rank): for each owner i, counts[i] entries with ranks 0..counts[i]-1."""
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    rank = np.arange(len(owner), dtype=np.int64) - np.repeat(_exclusive_cumsum(counts), counts)
    return owner, rank


def _query_positions(arrays, slots, q_len):
    """[slots, q_len]: the original position of each order index (identity without runs)."""
    positions = np.tile(np.arange(q_len, dtype=np.int64), (slots, 1))
    runs = np.asarray(arrays["runs"], dtype=np.int64).reshape(-1, 3)
    if len(runs) == 0:
        return positions
    run_counts = np.diff(np.asarray(arrays["head_run_offsets"], dtype=np.int64))
    run, rank = _expand(runs[:, 1])
    values = runs[run, 0] + runs[run, 2] * rank
    positions[run_counts > 0] = values.reshape(-1, q_len)  # runs permute the whole head
    return positions


def _query_cells(arrays, positions, block_q, num_q_blocks):
    """The (tile, query block) cells: tile, block, first and last row position, and per tile its
    first cell and cell count (cells sorted by tile)."""
    q_len = positions.shape[1]
    tiles = np.asarray(arrays["tiles"], dtype=np.int64).reshape(-1, 2)
    tile_counts = np.diff(np.asarray(arrays["head_tile_offsets"], dtype=np.int64))
    tile_slot = np.repeat(np.arange(len(tile_counts), dtype=np.int64), tile_counts)
    tile, rank = _expand(tiles[:, 1] - tiles[:, 0])
    rows = positions.reshape(-1)[tile_slot[tile] * q_len + tiles[tile, 0] + rank]
    key = tile * num_q_blocks + rows // block_q
    if len(key) > 1 and np.any(key[1:] < key[:-1]):  # phase-major orders: group the rows
        order = np.argsort(key, kind="stable")
        key, rows = key[order], rows[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else key
    cell_tile = key[starts] // num_q_blocks
    cells = {
        "tile": cell_tile,
        "block": key[starts] % num_q_blocks,
        "first": np.minimum.reduceat(rows, starts) if len(key) else rows,
        "last": np.maximum.reduceat(rows, starts) if len(key) else rows,
    }
    cell_count = np.bincount(cell_tile, minlength=len(tiles)).astype(np.int64)
    return cells, cell_count, _exclusive_cumsum(cell_count), tile_slot


RECORD_KINDS = (("tile_span_offsets", "spans", 2), ("tile_strided_offsets", "strided_spans", 3),
                ("tile_column_offsets", "columns", 1))


def _records(arrays, kind, tile_begin, tile_end):
    """One kind of key record of tiles [tile_begin, tile_end) as (tile, first key, last key,
    step); step is 1 for spans and columns."""
    offsets_name, records_name, width = kind
    offsets = np.asarray(arrays[offsets_name], dtype=np.int64)
    lo, hi = offsets[tile_begin], offsets[tile_end]
    records = np.asarray(arrays[records_name])[lo:hi].reshape(-1, width)  # int32 keys
    tile = tile_begin + np.repeat(np.arange(tile_end - tile_begin, dtype=np.int64),
                                  np.diff(offsets[tile_begin:tile_end + 1]))
    if width == 1:
        return tile, records[:, 0], records[:, 0], 1
    # A span's and a strided span's end is their last key + 1.
    return tile, records[:, 0], records[:, 1] - 1, (records[:, 2] if width == 3 else 1)


def _align_up(first, key, step):
    """The first key >= `key` of the run first, first + step, ..."""
    return first + np.maximum(0, -((first - key) // step)) * step


def _align_down(first, key, step):
    """The last key <= `key` of the run first, first + step, ..."""
    return first + ((key - first) // step) * step


def _pieces(tile, first, last, step, block_k):
    """Records cut at key-block edges: (tile, key block, first key, last key, step), non-empty.
    Most records (columns, short spans) lie in one block and are kept as they are."""
    block = first // block_k
    single = block == last // block_k
    if np.all(single):
        return tile, block, first, last, step
    steps = np.broadcast_to(step, first.shape)
    parts = [(tile[single], block[single], first[single], last[single], steps[single])]
    tile, first, last, steps = tile[~single], first[~single], last[~single], steps[~single]
    record, rank = _expand(last // block_k - first // block_k + 1)
    block = first[record] // block_k + rank
    lo = _align_up(first[record], block * block_k, steps[record])
    hi = _align_down(first[record], np.minimum(last[record], (block + 1) * block_k - 1),
                     steps[record])
    keep = lo <= hi
    parts.append((tile[record][keep], block[keep], lo[keep], hi[keep], steps[record][keep]))
    return tuple(np.concatenate(column) for column in zip(*parts))


def _distances_meet(low, high, lower, upper, period, band):
    """Whether some distance of [low, high] lies in [lower, upper] and, with a period, has a phase
    below the band."""
    low, high = np.maximum(low, lower), np.minimum(high, upper)
    if not np.any(period > 0):
        return low <= high
    phase = np.mod(low, np.maximum(period, 1))
    banded = (phase < band) | (low + (period - phase) <= high)
    return (low <= high) & ((period == 0) | banded)


def _lifted(masks, kept):
    """Pairs a bidirectional media item lifts past the mask are not evaluated: kept."""
    lifted = masks["media_bidirectional"]
    return kept | (lifted != 0) if np.ndim(lifted) or lifted else kept


def _keeps(masks, rows, keys, offset):
    """Per (cell, piece): whether the mask keeps a pair of rows [first, last] x keys (first, last,
    step). masks: field name -> per-pair values (or one scalar for all)."""
    key_first, key_last, step = keys
    lower = np.where(masks["causal"] != 0, 0, -_FAR)
    lower = np.maximum(lower, np.where(masks["min_distance"] > 0, masks["min_distance"], -_FAR))
    window, sink = masks["window"], masks["window_sink"]
    period, band = masks["period"], masks["band"]
    aligned_last = rows[1] + offset
    if not np.any(window > 0) and not np.any(period > 0):
        # Causal and minimum distance only: the nearest distance, last row to first key, decides.
        return _lifted(masks, aligned_last - key_first >= lower)
    aligned_first = rows[0] + offset
    # Keys below the sink are exempt from the window; the others are held to it.
    exempt_last = _align_down(key_first, np.minimum(key_last, sink - 1), step)
    exempt = (window == 0) | (key_first < sink)
    kept = exempt & _distances_meet(aligned_first - np.where(window == 0, key_last, exempt_last),
                                    aligned_last - key_first, lower, _FAR, period, band)
    held_first = _align_up(key_first, np.maximum(key_first, sink), step)
    held = (window > 0) & (held_first <= key_last)
    kept |= held & _distances_meet(aligned_first - key_last, aligned_last - held_first, lower,
                                   window - 1, period, band)
    return _lifted(masks, kept)


def _pick(values, index):
    """values[index], or the scalar itself (one value for every record)."""
    return values[index] if np.ndim(values) else values


def _mark_pieces(flat, pieces, query, mask_fields, offset):
    """Marks the blocks of the (cell, piece) pairs the mask keeps."""
    tile, block, first, last, step = pieces
    cells, cell_count, cell_first = query
    if len(tile) and cell_count.max() == 1:  # every tile in one query block: no expansion
        piece, cell = slice(None), cell_first[tile]
    else:
        piece, rank = _expand(cell_count[tile])
        cell = cell_first[tile[piece]] + rank
    masks = {name: _pick(values, tile[piece]) for name, values in mask_fields.items()}
    kept = _keeps(masks, (cells["first"][cell], cells["last"][cell]),
                  (first[piece], last[piece], _pick(step, piece)), offset)
    flat[(cells["base"][cell] + block[piece])[kept]] = True


def _mask_fields(arrays):
    """Field name -> per-tile values, or one scalar each where every tile has the same policy."""
    table = np.asarray(arrays["masks"], dtype=np.int64).reshape(-1, len(MASK_FIELDS))
    if len(np.unique(table, axis=0)) == 1:
        return dict(zip(MASK_FIELDS, table[0]))
    rows = table[np.asarray(arrays["tile_masks"], dtype=np.int64)]
    return {name: rows[:, i] for i, name in enumerate(MASK_FIELDS)}


def _causal_reach(mask_fields, cells, cell_count, offset):
    """Per tile, the last key its rows reach, where that alone decides which blocks a span or a
    column marks: every tile in one query block and one policy without window or band (causal,
    minimum distance), the usual vertical-slash plan. None otherwise (the general path)."""
    if not len(cell_count) or cell_count.max() != 1 or cell_count.min() != 1 or \
            any(np.ndim(value) for value in mask_fields.values()) or \
            mask_fields["window"] > 0 or mask_fields["period"] > 0:
        return None
    if mask_fields["media_bidirectional"] or not (mask_fields["causal"] or
                                                   mask_fields["min_distance"] > 0):
        return np.full(len(cell_count), _FAR)
    lower = max(0 if mask_fields["causal"] else -_FAR, mask_fields["min_distance"])
    return cells["last"] + (offset - lower)  # cells are the tiles, in order


def _mark_reached(flat, arrays, kind, tile_range, reach, base, block_k):
    """Spans or columns of the tiles in tile_range on the fast path (_causal_reach): a record
    marks the key blocks from its first key's to that of its last key within its tile's reach."""
    offsets_name, records_name, width = kind
    tile_begin, tile_end = tile_range
    offsets = np.asarray(arrays[offsets_name], dtype=np.int64)
    counts = np.diff(offsets[tile_begin:tile_end + 1])
    records = np.asarray(arrays[records_name])[offsets[tile_begin]:offsets[tile_end]]
    first = records.reshape(-1, width)[:, 0]
    tile_reach = np.repeat(reach[tile_begin:tile_end], counts)
    kept = first <= tile_reach
    first_block = (first // block_k)[kept]
    tile_base = np.repeat(base[tile_begin:tile_end], counts)[kept]
    if width == 1:
        flat[tile_base + first_block] = True
        return
    last = np.minimum(records[:, 1][kept] - 1, tile_reach[kept])  # a span's end is last + 1
    blocks = last // block_k - first_block + 1
    if np.all(blocks == 1):
        flat[tile_base + first_block] = True
        return
    span, rank = _expand(blocks)
    flat[tile_base[span] + first_block[span] + rank] = True


def _mark_pass(out, arrays, shape, block_q, block_k):
    _, _, q_len, kv_len, _ = shape
    slots, num_q_blocks, num_k_blocks = out.shape
    positions = _query_positions(arrays, slots, q_len)
    cells, cell_count, cell_first, tile_slot = _query_cells(arrays, positions, block_q,
                                                            num_q_blocks)
    # The flat index of each cell's key block 0 in `out`.
    cells["base"] = (tile_slot[cells["tile"]] * num_q_blocks + cells["block"]) * num_k_blocks
    query = (cells, cell_count, cell_first)
    mask_fields = _mask_fields(arrays)
    reach = _causal_reach(mask_fields, cells, cell_count, kv_len - q_len)
    record_counts = sum(np.diff(np.asarray(arrays[kind[0]], dtype=np.int64))
                        for kind in RECORD_KINDS)
    ends = np.cumsum(record_counts)
    flat = out.reshape(-1)
    tile_begin = 0
    while tile_begin < len(record_counts):
        done = ends[tile_begin - 1] if tile_begin else 0
        tile_end = max(tile_begin + 1,
                       int(np.searchsorted(ends, done + CHUNK_RECORDS, side="right")))
        for kind in RECORD_KINDS:
            if kind[1] != "strided_spans" and reach is not None:
                _mark_reached(flat, arrays, kind, (tile_begin, tile_end), reach, cells["base"],
                              block_k)
                continue
            pieces = _pieces(*_records(arrays, kind, tile_begin, tile_end), block_k)
            _mark_pieces(flat, pieces, query, mask_fields, kv_len - q_len)
        tile_begin = tile_end


def block_map(passes, shape, block_q, block_k):
    """bool [head slots, ceil(q_len / block_q), ceil(kv_len / block_k)]: the blocks holding a
    computed pair of any pass. passes: each pass's arrays (Plan.pass_arrays); shape: (batch, heads,
    q_len, kv_len, tile_rows)."""
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block_q, block_k: expected >= 1, got {block_q}, {block_k}")
    batch, heads, q_len, kv_len, _ = shape
    out = np.zeros((batch * heads, -(-q_len // block_q), -(-kv_len // block_k)), dtype=bool)
    for arrays in passes:
        fields = tuple(arrays.get("mask_fields", MASK_FIELDS))
        if fields != MASK_FIELDS:
            raise ValueError(f"mask_fields: expected {MASK_FIELDS}, got {fields}")
        _mark_pass(out, arrays, shape, block_q, block_k)
    return out


def plan_block_map(plan, block_q, block_k):
    """block_map of an mmsparse.Plan (its host plan: built or downloaded on the first call)."""
    passes = [plan.pass_arrays(p) for p in range(plan.num_passes)]
    return block_map(passes, plan.shape, block_q, block_k)
