//! The node table: the compact, fixed-layout description of one graph node that TypeScript
//! writes and the kernels read. Its layout is part of the ABI (see `src/backend/node_table.ts`),
//! so every offset is pinned by a compile-time assert below.

const std = @import("std");

pub const dims_max = 4;
pub const sources_max = 4;
pub const params_max = 12;

/// Element types: the dtype traits table (dtype.zig).
pub const DType = @import("dtype.zig").DType;

/// Operations the CPU core executes. Views (view, reshape, permute, transpose) never reach the
/// core: they only change a tensor's data address and strides. The numbering is shared with
/// TypeScript (`src/op.ts`).
pub const Op = enum(u32) {
    add = 1,
    sub = 2,
    mul = 3,
    div = 4,
    scale = 5, // params[0]: f32 factor
    sqr = 6,
    sqrt = 7,
    sum = 8, // dst [1,1,1,1]: sum of every element
    mean = 9, // dst [1, ne1, ne2, ne3]: mean of each row
    repeat = 10, // dst shape is a multiple of src0's
    mul_mat = 11, // src0 [K,M,a,b] (f32|f16) x src1 [K,N,c,d] f32 -> dst [M,N,c,d] f32
    cpy = 12, // dst (any strides, f32/f16; i32->i32; f32/f16 <-> q8_0/q4_0 by rows) <- src0; cont is cpy too
    get_rows = 13, // src0 [ne0, rows, ne2] f32|f16|bf16|quant (i32 -> i32), src1 [n, ne2] i32|i64 -> dst [ne0, n, ne2] f32
    norm = 14, // params[0]: f32 eps
    rms_norm = 15, // params[0]: f32 eps
    soft_max = 16, // params[0]: f32 scale; src1 (optional) mask [ne0, >=ne1] f32
    gelu = 17,
    silu = 18,
    relu = 19,
    // Fused ops: never graph ops; the CPU plan builder (src/backend/fuse.ts) emits them for a
    // pair of nodes whose intermediate nobody else reads. Same arithmetic as the pair, so the
    // results are bitwise those of the two nodes.
    silu_mul = 20, // dst = silu(src0) * src1, one shape
    rms_norm_mul = 21, // params[0]: f32 eps; dst = rms_norm(src0) * src1, src1.ne[0] == ne[0]
    // params (f32): n_dims, mode (0 normal, 2 neox), freq_base, freq_scale, ext_factor,
    // attn_factor, beta_fast, beta_slow, n_ctx_orig; src0 f32|f16 [ne0, heads, tokens, ne3],
    // src1 i32 positions [tokens], src2 (optional) f32 freq factors [>= n_dims/2]
    // (kernels/rope.zig)
    rope = 23,
    // dst (the target's memory, f32 | f16, any strides) [ne0, R, B, C]: row (src1[n, b, c], b, c)
    // <- src0 row (n, b, c) converted; src0 f32 [ne0, N, B, C], src1 i32 [N, B, C] (kernels/copy.zig)
    set_rows = 24,
    // Unary math (kernels/unary.zig): dst and src0 of one shape and one dtype, f32 or f16, any
    // strides. Each as ggml-cpu defines it (vec.h, unary-ops.cpp).
    abs = 25,
    sgn = 26,
    neg = 27,
    step = 28,
    tanh = 29,
    elu = 30,
    leaky_relu = 31, // params[0]: f32 negative slope
    sigmoid = 32,
    hard_sigmoid = 33,
    hard_swish = 34,
    gelu_erf = 35,
    gelu_quick = 36,
    exp = 37,
    log = 38,
    sin = 39,
    cos = 40,
    clamp = 41, // params[0], params[1]: f32 min, max
    floor = 42,
    ceil = 43,
    round = 44,
    trunc = 45,
    // Row reductions (kernels/reduce_rows.zig), src0 [ne0, ne1, ne2, ne3]:
    sum_rows = 50, // dst [1, ne1, ne2, ne3], src0's dtype (f32 | f16)
    argmax = 51, // dst i32 [ne1, ne2, ne3, 1]: the first index of each row's largest value
    max_rows = 52, // dst [1, ne1, ne2, ne3], src0's dtype
    min_rows = 53, // dst [1, ne1, ne2, ne3], src0's dtype
    count_equal = 54, // src0, src1 i32 of one shape; dst i64 [1]: elements equal (as ggml)
    cumsum = 55,
    // Shape and indexing ops (kernels/indexing.zig, kernels/sort.zig); params are f32 slots
    // holding whole numbers unless noted. f32, f16 and i32 elements are moved as bits.
    concat = 70, // params[0]: dim; dst = src0 then src1 along dim
    pad = 71, // params[2d], params[2d + 1]: zeros before and after dim d (ggml_pad_ext)
    pad_reflect_1d = 72, // params p0, p1: dim 0 mirrored about its edges
    roll = 73, // params[d]: shift of dim d, |shift| < ne[d]
    repeat_back = 74, // dst [ne] <- sum of the tiles of src0 [ne * repeats] (f32 | f16)
    argsort = 75, // params[0]: 0 ascending, 1 descending; dst i32 [ne0, ...] column indices
    top_k = 76, // dst i32 [k, ...]: the columns of the k largest, largest first
    tri = 77, // params[0]: ggml_tri_type; elements outside the triangle become 0
    diag_mask_inf = 78, // params[0]: n_past; column i of row j is -inf when i > n_past + j
    arange = 79, // no sources; params f32 start, stop, step; dst f32 [ceil((stop - start) / step)]
    fill = 80, // params[0]: f32 value; dst (shape of src0, f32 | f16) all that value
    pad_circular = 85, // params as pad; the pad is src0 wrapped around (ggml_pad_ext_circular)
    // dst = src0 with src1 added (acc) or written (set) into the view of dst at params: the
    // view's strides nb1, nb2, nb3 and offset, in elements, each as two f32 slots (low 24 bits,
    // then the rest), nb0 one element. src0 and dst contiguous, one shape; src1 any strides, the
    // view's shape (kernels/view_write.zig).
    acc = 90, // f32 | f16
    set = 91, // f32 | f16 | i32, moved as bits
    // Fused (src/backend/cpu/fuse.ts), never a graph op: conv2d's planar im2col + mul_mat.
    // params (f32) s0, s1, p0, p1, d0, d1, KW, KH; src0 weights [IC*KH*KW, OC] f32|f16, src1
    // f32 image [IW, IH, IC, N]; dst f32 [OC, OW*OH, N, 1] (kernels/conv2d.zig). Not 22: that
    // is cont's graph code, which no core code reuses.
    conv_2d = 108,
    // params (f32): scale, max_bias (ALiBi), logit_softcap (0: none); src0 q f32 [DK, T, Hq, B],
    // src1 k f32|f16 [DK, nKv, Hkv, B'], src2 v f32|f16 [DV, nKv, Hkv, B'], src3 (optional)
    // mask f32|f16 [nKv, >=T, Hq/m, B/m']; dst f32 [DV, Hq, T, B] (kernels/attention.zig)
    flash_attn_ext = 110,
    // params (f32 whole numbers): s0, s1, p0, p1, d0, d1, is_2d; src0 the kernel (shape only),
    // src1 f32 image; dst f32|f16 [IC*KH*KW, OW, OH, N] (kernels/conv.zig)
    im2col = 111,
    l2_norm = 112, // params[0]: f32 eps; f32 rows (kernels/group_norm.zig)
    group_norm = 113, // params (f32): group count, eps; f32 [W, H, C, N] (kernels/group_norm.zig)
    pool_1d = 114, // params (f32): op (0 max, 1 avg), k0, s0, p0; src0 f32|f16 (kernels/pool.zig)
    pool_2d = 115, // params (f32): op, k0, k1, s0, s1, p0, p1; src0 f32|f16 (kernels/pool.zig)
    interpolate = 116, // params[0]: mode (0 nearest, 1 bilinear, 2 bicubic, +256 align corners) (kernels/interpolate.zig)
    timestep_embedding = 117, // params (f32): dim, max_period; src0 f32 [N] (kernels/interpolate.zig)
    conv_transpose_1d = 118, // params[0]: stride; src0 kernel f32|f16, src1 f32 (kernels/conv_transpose.zig)
    conv_transpose_2d = 119, // params[0]: stride; src0 kernel f32|f16, src1 f32 (kernels/conv_transpose.zig)
    _,

    /// The unary element-wise ops (named as above): validation and dispatch derive their
    /// handling from this list, so a new unary op is its code above, its name here and its
    /// math in kernels/elementwise.zig.
    pub const Unary = enum { scale, sqr, sqrt, gelu, silu, relu };

    pub fn is_unary(op: Op) bool {
        inline for (@typeInfo(Unary).@"enum".fields) |field| {
            if (op == @field(Op, field.name)) return true;
        }
        return false;
    }

    /// The unary math ops of kernels/unary.zig (f32 and f16), named as above.
    pub const UnaryMath = enum {
        abs,
        sgn,
        neg,
        step,
        tanh,
        elu,
        leaky_relu,
        sigmoid,
        hard_sigmoid,
        hard_swish,
        gelu_erf,
        gelu_quick,
        exp,
        log,
        sin,
        cos,
        clamp,
        floor,
        ceil,
        round,
        trunc,
    };

    pub fn is_unary_math(op: Op) bool {
        inline for (@typeInfo(UnaryMath).@"enum".fields) |field| {
            if (op == @field(Op, field.name)) return true;
        }
        return false;
    }
};

/// Where one tensor's elements live: a native address and ggml-order shape and byte strides.
pub const TensorDesc = extern struct {
    data: u64,
    ne: [dims_max]i64,
    nb: [dims_max]i64,
    dtype: u32,
    reserved: u32,

    pub fn element_count(self: *const TensorDesc) i64 {
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3];
    }

    pub fn rows(self: *const TensorDesc) i64 {
        return self.ne[1] * self.ne[2] * self.ne[3];
    }

    pub fn is_contiguous(self: *const TensorDesc) bool {
        const dtype: DType = @enumFromInt(self.dtype);
        const size: i64 = @intCast(dtype.block_bytes());
        const blocks0 = @divTrunc(self.ne[0], @as(i64, @intCast(dtype.block_size())));
        return self.nb[0] == size and self.nb[1] == self.nb[0] * blocks0 and
            self.nb[2] == self.nb[1] * self.ne[1] and self.nb[3] == self.nb[2] * self.ne[2];
    }

    /// True when the elements of each row are adjacent (the fast path of row kernels).
    pub fn rows_contiguous(self: *const TensorDesc) bool {
        return self.nb[0] == @as(i64, @intCast(DType.block_bytes(@enumFromInt(self.dtype))));
    }

    /// Address of the first element of row (i1, i2, i3).
    pub fn row(self: *const TensorDesc, index1: i64, index2: i64, index3: i64) usize {
        const offset = index1 * self.nb[1] + index2 * self.nb[2] + index3 * self.nb[3];
        return @intCast(@as(i64, @intCast(self.data)) + offset);
    }

    /// Bytes from the first element to one past the last, for bounds checks. Block types
    /// (nb[0] = one block's bytes) count ne[0] in blocks; validation keeps it whole blocks.
    pub fn extent_bytes(self: *const TensorDesc) u64 {
        const dtype: DType = @enumFromInt(self.dtype);
        const block: i64 = @intCast(dtype.block_size());
        var last: i64 = (@divTrunc(self.ne[0] + block - 1, block) - 1) * self.nb[0];
        for (1..dims_max) |d| last += (self.ne[d] - 1) * self.nb[d];
        return @intCast(last + @as(i64, @intCast(dtype.block_bytes())));
    }
};

pub const Node = extern struct {
    op: u32,
    src_count: u32,
    /// Raw 32-bit parameter slots; each op documents whether a slot is f32 or i32.
    params: [params_max]u32,
    dst: TensorDesc,
    src: [sources_max]TensorDesc,

    pub fn param_f32(self: *const Node, index: usize) f32 {
        return @bitCast(self.params[index]);
    }

    pub fn param_i32(self: *const Node, index: usize) i32 {
        return @bitCast(self.params[index]);
    }
};

comptime {
    std.debug.assert(@sizeOf(TensorDesc) == 80);
    std.debug.assert(@offsetOf(TensorDesc, "ne") == 8);
    std.debug.assert(@offsetOf(TensorDesc, "nb") == 40);
    std.debug.assert(@offsetOf(TensorDesc, "dtype") == 72);
    std.debug.assert(@offsetOf(Node, "params") == 8);
    std.debug.assert(@offsetOf(Node, "dst") == 56);
    std.debug.assert(@offsetOf(Node, "src") == 136);
    std.debug.assert(@sizeOf(Node) == 456);
}

/// Status codes shared by every export and every kernel. 0 is success; errors are negative.
/// The numbering is shared with TypeScript (`src/errors.ts`).
pub const Status = enum(c_int) {
    ok = 0,
    invalid_argument = -1,
    out_of_memory = -2,
    out_of_bounds = -3,
    invalid_handle = -4, // freed, never allocated, or of another kind: use after free, double free
    unsupported = -5, // op or dtype combination the core does not run
    shape_mismatch = -6,
    out_of_space = -7, // an allocator or caller buffer is too small; the size needed is reported
    limit_reached = -8, // a named fixed limit (see the message)
    busy = -9, // a pool or plan is already computing
    stale_plan = -10, // a plan refers to a buffer that was freed since it was made
    io_error = -11, // a file could not be opened, examined or mapped (the message names the OS error)
    read_only = -12, // a write into a read-only file mapping, refused (it would fault)
};

/// What a kernel is handed: this thread's index and count, the plan's whole work buffer (at least
/// `work_size_bytes(node, thread_count)` bytes, 64-byte aligned; a kernel partitions it itself),
/// and a barrier across all threads of the pool, for kernels with phases (pack, then compute).
/// Every thread of the pool calls the kernel for every node, so a kernel that calls the barrier
/// must do so the same number of times on every thread.
/// `prepacked` is the plan's prepacked copy of this node's constant operand (see mul_mat), set
/// per node by the plan; null for nodes without one.
pub const Work = extern struct {
    thread_index: u32,
    thread_count: u32,
    scratch: [*]align(64) u8,
    scratch_size_bytes: u64,
    barrier_context: *anyopaque,
    barrier: *const fn (context: *anyopaque) callconv(.c) void,
    prepacked: ?[*]align(64) u8 = null,
    prepacked_size_bytes: u64 = 0,

    pub fn sync(self: *const Work) void {
        self.barrier(self.barrier_context);
    }
};
