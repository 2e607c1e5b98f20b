/**
 * llama.cpp's ggml RPC protocol, version 7.0.0, as `ggml/src/ggml-rpc/ggml-rpc.cpp` (llama.cpp as
 * vendored by llama-cpp-python 0.3.36) defines it: the command numbers, the framing, every
 * request and reply struct, the packed `rpc_tensor` and the graph message, as pack and unpack
 * functions over bytes.
 *
 * Framing. A request is `| cmd (u8) | size (u64 LE) | payload (size bytes) |`; a reply, for the
 * commands that have one, is `| size (u64 LE) | payload |`. All integers are little endian and
 * every struct is packed (`#pragma pack(1)`). The protocol has no error replies: a server that
 * refuses a request closes the connection. The first command on a connection must be HELLO.
 *
 * Every unpack function takes untrusted bytes: it checks each size and count against the
 * bytes it was given, allocates nothing larger than those bytes justify, and throws nothing but
 * {@link RpcProtocolError}. Fixed-size messages must be exactly their size, as ggml's
 * `recv_msg` demands.
 * @module
 */

import { RpcProtocolError } from "../errors.ts";

/** Protocol major version (`RPC_PROTO_MAJOR_VERSION`): a peer with another major is refused. */
export const RPC_PROTO_MAJOR = 7;
/** Protocol minor version: a client refuses a server whose minor is above its own. */
export const RPC_PROTO_MINOR = 0;
/** Protocol patch version. */
export const RPC_PROTO_PATCH = 0;

/** `enum rpc_cmd`: command numbers. HELLO is 14 in every version. */
export const RpcCmd = {
  ALLOC_BUFFER: 0,
  GET_ALIGNMENT: 1,
  GET_MAX_SIZE: 2,
  BUFFER_GET_BASE: 3,
  FREE_BUFFER: 4,
  BUFFER_CLEAR: 5,
  SET_TENSOR: 6,
  SET_TENSOR_HASH: 7,
  GET_TENSOR: 8,
  COPY_TENSOR: 9,
  GRAPH_COMPUTE: 10,
  GET_DEVICE_MEMORY: 11,
  INIT_TENSOR: 12,
  GET_ALLOC_SIZE: 13,
  HELLO: 14,
  DEVICE_COUNT: 15,
  GRAPH_RECOMPUTE: 16,
  MEMSET_TENSOR: 17,
  /** The client's queue marker (never sent). */
  NONE: 18,
} as const;

/** A command's name. */
export type RpcCmdName = keyof typeof RpcCmd;
/** A command number. */
export type RpcCmdCode = typeof RpcCmd[RpcCmdName];

/** `RPC_CMD_COUNT`: a server closes the connection on a command byte at or above it. */
export const RPC_CMD_COUNT = 19;

/** `RPC_CONN_CAPS_SIZE`: bytes of connection capabilities in HELLO (all zero: plain TCP). */
export const RPC_CONN_CAPS_SIZE = 24;

/** The client sends SET_TENSOR_HASH first for data larger than this (`HASH_THRESHOLD`). */
export const RPC_HASH_THRESHOLD = 10 * 1024 * 1024;

/** Bytes of a request header: the command byte and the u64 payload size. */
export const RPC_REQUEST_HEADER_SIZE = 9;
/** Bytes of a reply header: the u64 payload size. */
export const RPC_REPLY_HEADER_SIZE = 8;

/** ggml's limits as rpc_tensor carries them (`ggml.h`). */
export const GGML_MAX_DIMS = 4;
/** `GGML_MAX_SRC`. */
export const GGML_MAX_SRC = 10;
/** `GGML_MAX_OP_PARAMS / sizeof(int32_t)`. */
export const GGML_MAX_OP_PARAMS_I32 = 16;
/** `GGML_MAX_NAME`. */
export const GGML_MAX_NAME = 64;

/**
 * Byte offsets of the packed `struct rpc_tensor` fields, and its size (296). Checked against
 * the C struct by compiling it with gcc and the ggml headers of this version (offsetof/sizeof):
 * id 0, type 8, buffer 12, ne 20, nb 36, op 52, op_params 56, flags 120, src 124, view_src 204,
 * view_offs 212, data 220, name 228, use_count 292, sizeof 296; sizeof(rpc_msg_get_alloc_size_req)
 * 3260, sizeof(rpc_msg_memset_tensor_req) 313.
 */
export const RPC_TENSOR_OFFSETS = {
  id: 0,
  type: 8,
  buffer: 12,
  ne: 20,
  nb: 36,
  op: 52,
  opParams: 56,
  flags: 120,
  src: 124,
  viewSrc: 204,
  viewOffs: 212,
  data: 220,
  name: 228,
  useCount: 292,
} as const;

/** `sizeof(rpc_tensor)`. */
export const RPC_TENSOR_SIZE = 296;

/**
 * A ggml tensor as the protocol carries it. Ids and addresses are u64 (the sender's pointers),
 * so they are bigints. `ne` and `nb` are u32 on the wire (ggml's int64/size_t truncated).
 */
export interface RpcTensor {
  /** The sender's id for the tensor (its address in llama.cpp's client); 0 means none. */
  id: bigint;
  /** ggml type id. */
  type: number;
  /** The server's buffer handle (from ALLOC_BUFFER), 0 for none. */
  buffer: bigint;
  /** Elements per dimension (u32 each). */
  ne: [number, number, number, number];
  /** Byte strides (u32 each). */
  nb: [number, number, number, number];
  /** ggml op number. */
  op: number;
  /** The 16 int32 op_params slots. */
  opParams: Int32Array;
  /** ggml tensor flags (int32). */
  flags: number;
  /** Source ids, 10 of them (0: none). */
  src: bigint[];
  /** Id of the tensor whose memory this view shares (0: none). */
  viewSrc: bigint;
  /** Byte offset of the view in `viewSrc`. */
  viewOffs: bigint;
  /** The tensor's address in the server's memory (buffer base + offset), 0 for none. */
  data: bigint;
  /** The name, at most 63 bytes of UTF-8. */
  name: string;
  /** How many graph nodes use this tensor (graph messages only; 0 elsewhere). */
  useCount: number;
}

/** A tensor with every field zero, as ggml serializes a missing tensor. */
export function emptyRpcTensor(): RpcTensor {
  return {
    id: 0n,
    type: 0,
    buffer: 0n,
    ne: [0, 0, 0, 0],
    nb: [0, 0, 0, 0],
    op: 0,
    opParams: new Int32Array(GGML_MAX_OP_PARAMS_I32),
    flags: 0,
    src: new Array<bigint>(GGML_MAX_SRC).fill(0n),
    viewSrc: 0n,
    viewOffs: 0n,
    data: 0n,
    name: "",
    useCount: 0,
  };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const U32_MAX = 0xffff_ffff;
const U64_MAX = 0xffff_ffff_ffff_ffffn;

function checkU32(field: string, value: number): void {
  if (!Number.isInteger(value) || value < 0 || value > U32_MAX) {
    throw new RpcProtocolError(field, -1, `${value} is not a u32`);
  }
}

function checkU64(field: string, value: bigint): void {
  if (value < 0n || value > U64_MAX) throw new RpcProtocolError(field, -1, `${value} is not a u64`);
}

/** Writes `t` as a packed rpc_tensor at byte `offset` of `view` (296 bytes). */
export function packRpcTensor(view: DataView, offset: number, t: RpcTensor): void {
  if (offset < 0 || offset + RPC_TENSOR_SIZE > view.byteLength) {
    throw new RpcProtocolError("tensor", offset, `no room for ${RPC_TENSOR_SIZE} bytes`);
  }
  const o = RPC_TENSOR_OFFSETS;
  checkU64("tensor.id", t.id);
  view.setBigUint64(offset + o.id, t.id, true);
  checkU32("tensor.type", t.type);
  view.setUint32(offset + o.type, t.type, true);
  checkU64("tensor.buffer", t.buffer);
  view.setBigUint64(offset + o.buffer, t.buffer, true);
  for (let d = 0; d < GGML_MAX_DIMS; d++) {
    checkU32(`tensor.ne[${d}]`, t.ne[d]!);
    checkU32(`tensor.nb[${d}]`, t.nb[d]!);
    view.setUint32(offset + o.ne + 4 * d, t.ne[d]!, true);
    view.setUint32(offset + o.nb + 4 * d, t.nb[d]!, true);
  }
  checkU32("tensor.op", t.op);
  view.setUint32(offset + o.op, t.op, true);
  for (let i = 0; i < GGML_MAX_OP_PARAMS_I32; i++) {
    view.setInt32(offset + o.opParams + 4 * i, t.opParams[i] ?? 0, true);
  }
  view.setInt32(offset + o.flags, t.flags | 0, true);
  for (let i = 0; i < GGML_MAX_SRC; i++) {
    const id = t.src[i] ?? 0n;
    checkU64(`tensor.src[${i}]`, id);
    view.setBigUint64(offset + o.src + 8 * i, id, true);
  }
  checkU64("tensor.view_src", t.viewSrc);
  view.setBigUint64(offset + o.viewSrc, t.viewSrc, true);
  checkU64("tensor.view_offs", t.viewOffs);
  view.setBigUint64(offset + o.viewOffs, t.viewOffs, true);
  checkU64("tensor.data", t.data);
  view.setBigUint64(offset + o.data, t.data, true);
  // The name is NUL-padded and always NUL-terminated (ggml's snprintf into char[64]).
  const nameBytes = new Uint8Array(view.buffer, view.byteOffset + offset + o.name, GGML_MAX_NAME);
  nameBytes.fill(0);
  const encoded = encoder.encode(t.name);
  nameBytes.set(encoded.subarray(0, truncatedNameLength(encoded)));
  view.setInt32(offset + o.useCount, t.useCount | 0, true);
}

/** Bytes of `encoded` that fit in 63 bytes without splitting a UTF-8 sequence. */
function truncatedNameLength(encoded: Uint8Array): number {
  let n = Math.min(encoded.length, GGML_MAX_NAME - 1);
  // Back off continuation bytes (10xxxxxx) so a multi-byte character is not cut in half.
  if (n < encoded.length) { while (n > 0 && ((encoded[n] ?? 0) & 0xc0) === 0x80) n--; }
  return n;
}

/** Reads a packed rpc_tensor at byte `offset` of `view`; `field` names it in errors. */
export function unpackRpcTensor(view: DataView, offset: number, field = "tensor"): RpcTensor {
  if (offset < 0 || offset + RPC_TENSOR_SIZE > view.byteLength) {
    throw new RpcProtocolError(
      field,
      offset,
      `needs ${RPC_TENSOR_SIZE} bytes, ${Math.max(0, view.byteLength - offset)} left`,
    );
  }
  const o = RPC_TENSOR_OFFSETS;
  const ne: [number, number, number, number] = [0, 0, 0, 0];
  const nb: [number, number, number, number] = [0, 0, 0, 0];
  for (let d = 0; d < GGML_MAX_DIMS; d++) {
    ne[d] = view.getUint32(offset + o.ne + 4 * d, true);
    nb[d] = view.getUint32(offset + o.nb + 4 * d, true);
  }
  const opParams = new Int32Array(GGML_MAX_OP_PARAMS_I32);
  for (let i = 0; i < GGML_MAX_OP_PARAMS_I32; i++) {
    opParams[i] = view.getInt32(offset + o.opParams + 4 * i, true);
  }
  const src: bigint[] = [];
  for (let i = 0; i < GGML_MAX_SRC; i++) src.push(view.getBigUint64(offset + o.src + 8 * i, true));
  const nameBytes = new Uint8Array(view.buffer, view.byteOffset + offset + o.name, GGML_MAX_NAME);
  const end = nameBytes.indexOf(0);
  return {
    id: view.getBigUint64(offset + o.id, true),
    type: view.getUint32(offset + o.type, true),
    buffer: view.getBigUint64(offset + o.buffer, true),
    ne,
    nb,
    op: view.getUint32(offset + o.op, true),
    opParams,
    flags: view.getInt32(offset + o.flags, true),
    src,
    viewSrc: view.getBigUint64(offset + o.viewSrc, true),
    viewOffs: view.getBigUint64(offset + o.viewOffs, true),
    data: view.getBigUint64(offset + o.data, true),
    // A name with no NUL in its 64 bytes is read as all 64 (ggml_set_name would cut it to 63).
    name: decoder.decode(nameBytes.subarray(0, end < 0 ? GGML_MAX_NAME : end)),
    useCount: view.getInt32(offset + o.useCount, true),
  };
}

// ---------------------------------------------------------------------------------------------
// Framing

/** Whether command `cmd` gets a reply (FREE_BUFFER, BUFFER_CLEAR, SET_TENSOR, GRAPH_COMPUTE,
 * GRAPH_RECOMPUTE, INIT_TENSOR and MEMSET_TENSOR do not). */
export function rpcCmdHasReply(cmd: number): boolean {
  return RPC_REPLY_SIZE[cmd] !== undefined;
}

/**
 * Reply payload sizes by command: a number for fixed-size replies, "request" for GET_TENSOR
 * (as many bytes as asked). Commands absent have no reply.
 */
export const RPC_REPLY_SIZE: Readonly<Record<number, number | "request">> = {
  [RpcCmd.ALLOC_BUFFER]: 16,
  [RpcCmd.GET_ALIGNMENT]: 8,
  [RpcCmd.GET_MAX_SIZE]: 8,
  [RpcCmd.BUFFER_GET_BASE]: 8,
  [RpcCmd.SET_TENSOR_HASH]: 1,
  [RpcCmd.GET_TENSOR]: "request",
  [RpcCmd.COPY_TENSOR]: 1,
  [RpcCmd.GET_DEVICE_MEMORY]: 16,
  [RpcCmd.GET_ALLOC_SIZE]: 8,
  [RpcCmd.HELLO]: 4 + RPC_CONN_CAPS_SIZE,
  [RpcCmd.DEVICE_COUNT]: 4,
};

/**
 * Request payload sizes by command for fixed-size requests; SET_TENSOR and GRAPH_COMPUTE are
 * variable ("variable"). A server can refuse a header whose size differs before reading on.
 */
export const RPC_REQUEST_SIZE: Readonly<Record<number, number | "variable">> = {
  [RpcCmd.ALLOC_BUFFER]: 12,
  [RpcCmd.GET_ALIGNMENT]: 4,
  [RpcCmd.GET_MAX_SIZE]: 4,
  [RpcCmd.BUFFER_GET_BASE]: 8,
  [RpcCmd.FREE_BUFFER]: 8,
  [RpcCmd.BUFFER_CLEAR]: 9,
  [RpcCmd.SET_TENSOR]: "variable",
  [RpcCmd.SET_TENSOR_HASH]: RPC_TENSOR_SIZE + 16,
  [RpcCmd.GET_TENSOR]: RPC_TENSOR_SIZE + 16,
  [RpcCmd.COPY_TENSOR]: 2 * RPC_TENSOR_SIZE,
  [RpcCmd.GRAPH_COMPUTE]: "variable",
  [RpcCmd.GET_DEVICE_MEMORY]: 4,
  [RpcCmd.INIT_TENSOR]: RPC_TENSOR_SIZE,
  [RpcCmd.GET_ALLOC_SIZE]: 4 + (1 + GGML_MAX_SRC) * RPC_TENSOR_SIZE,
  [RpcCmd.HELLO]: RPC_CONN_CAPS_SIZE,
  [RpcCmd.DEVICE_COUNT]: 0,
  [RpcCmd.GRAPH_RECOMPUTE]: 4,
  [RpcCmd.MEMSET_TENSOR]: RPC_TENSOR_SIZE + 17,
};

/** The request frame for `cmd` with `payload`: header and payload in one array. */
export function encodeRequest(cmd: RpcCmdCode, payload: Uint8Array): Uint8Array {
  const frame = new Uint8Array(RPC_REQUEST_HEADER_SIZE + payload.byteLength);
  const view = new DataView(frame.buffer);
  view.setUint8(0, cmd);
  view.setBigUint64(1, BigInt(payload.byteLength), true);
  frame.set(payload, RPC_REQUEST_HEADER_SIZE);
  return frame;
}

/** The reply frame for `payload`: its u64 size, then the payload. */
export function encodeReply(payload: Uint8Array): Uint8Array {
  const frame = new Uint8Array(RPC_REPLY_HEADER_SIZE + payload.byteLength);
  new DataView(frame.buffer).setBigUint64(0, BigInt(payload.byteLength), true);
  frame.set(payload, RPC_REPLY_HEADER_SIZE);
  return frame;
}

/** A parsed request header. */
export interface RpcRequestHeader {
  /** The command number (below {@link RPC_CMD_COUNT}, never NONE). */
  cmd: RpcCmdCode;
  /** The payload size in bytes, as sent (a u64: a bigint, may exceed what a server accepts). */
  size: bigint;
}

/**
 * Parses the 9-byte request header. Throws on an unknown command, or on a payload size that
 * differs from the command's fixed size; a variable size is returned for the caller to cap.
 */
export function parseRequestHeader(bytes: Uint8Array): RpcRequestHeader {
  if (bytes.byteLength !== RPC_REQUEST_HEADER_SIZE) {
    throw new RpcProtocolError(
      "request.header",
      0,
      `is ${RPC_REQUEST_HEADER_SIZE} bytes, got ${bytes.byteLength}`,
    );
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const cmd = view.getUint8(0);
  if (cmd >= RpcCmd.NONE) throw new RpcProtocolError("request.cmd", 0, `unknown command ${cmd}`);
  const size = view.getBigUint64(1, true);
  const fixed = RPC_REQUEST_SIZE[cmd];
  if (typeof fixed === "number" && size !== BigInt(fixed)) {
    throw new RpcProtocolError(
      "request.size",
      1,
      `${rpcCmdName(cmd)} takes ${fixed} bytes, header says ${size}`,
    );
  }
  return { cmd: cmd as RpcCmdCode, size };
}

/** Parses an 8-byte reply header: the payload size. */
export function parseReplyHeader(bytes: Uint8Array): bigint {
  if (bytes.byteLength !== RPC_REPLY_HEADER_SIZE) {
    throw new RpcProtocolError("reply.header", 0, `is 8 bytes, got ${bytes.byteLength}`);
  }
  return new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
}

/** The name of command number `cmd` ("cmd 42" for unknown numbers). */
export function rpcCmdName(cmd: number): string {
  for (const [name, code] of Object.entries(RpcCmd)) if (code === cmd) return name;
  return `cmd ${cmd}`;
}

// ---------------------------------------------------------------------------------------------
// Fixed-size messages

/** Bounds-checked little-endian reading of one message; every read names its field. */
class Reader {
  readonly view: DataView;
  pos = 0;
  constructor(readonly bytes: Uint8Array, readonly what: string) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  need(field: string, n: number): void {
    if (this.pos + n > this.bytes.byteLength) {
      throw new RpcProtocolError(
        `${this.what}.${field}`,
        this.pos,
        `needs ${n} bytes, ${this.bytes.byteLength - this.pos} left`,
      );
    }
  }
  u8(field: string): number {
    this.need(field, 1);
    return this.view.getUint8(this.pos++);
  }
  u32(field: string): number {
    this.need(field, 4);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  u64(field: string): bigint {
    this.need(field, 8);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }
  tensor(field: string): RpcTensor {
    this.need(field, RPC_TENSOR_SIZE);
    const t = unpackRpcTensor(this.view, this.pos, `${this.what}.${field}`);
    this.pos += RPC_TENSOR_SIZE;
    return t;
  }
  end(): void {
    if (this.pos !== this.bytes.byteLength) {
      throw new RpcProtocolError(
        this.what,
        this.pos,
        `${this.bytes.byteLength - this.pos} bytes past the end of the message`,
      );
    }
  }
}

/** Little-endian writing of one message of known size. */
class Writer {
  readonly bytes: Uint8Array;
  readonly view: DataView;
  pos = 0;
  constructor(size: number) {
    this.bytes = new Uint8Array(size);
    this.view = new DataView(this.bytes.buffer);
  }
  u8(field: string, v: number): this {
    if (!Number.isInteger(v) || v < 0 || v > 255) {
      throw new RpcProtocolError(field, -1, `${v} is not a u8`);
    }
    this.view.setUint8(this.pos++, v);
    return this;
  }
  u32(field: string, v: number): this {
    checkU32(field, v);
    this.view.setUint32(this.pos, v, true);
    this.pos += 4;
    return this;
  }
  u64(field: string, v: bigint | number): this {
    const b = typeof v === "bigint" ? v : BigInt(v);
    checkU64(field, b);
    this.view.setBigUint64(this.pos, b, true);
    this.pos += 8;
    return this;
  }
  tensor(t: RpcTensor): this {
    packRpcTensor(this.view, this.pos, t);
    this.pos += RPC_TENSOR_SIZE;
    return this;
  }
  raw(b: Uint8Array): this {
    this.bytes.set(b, this.pos);
    this.pos += b.byteLength;
    return this;
  }
  done(): Uint8Array {
    if (this.pos !== this.bytes.byteLength) throw new Error("Writer: size mismatch (a bug)");
    return this.bytes;
  }
}

/** HELLO request: the client's connection capabilities (24 bytes; zeros for plain TCP). */
export interface HelloRequest {
  /** 24 bytes of capabilities. */
  connCaps: Uint8Array;
}

/** HELLO reply: the server's protocol version and its connection capabilities. */
export interface HelloResponse {
  /** Major version. */
  major: number;
  /** Minor version. */
  minor: number;
  /** Patch version. */
  patch: number;
  /** 24 bytes of capabilities. */
  connCaps: Uint8Array;
}

function capsOf(field: string, caps: Uint8Array | undefined): Uint8Array {
  if (caps === undefined) return new Uint8Array(RPC_CONN_CAPS_SIZE);
  if (caps.byteLength !== RPC_CONN_CAPS_SIZE) {
    throw new RpcProtocolError(field, -1, `is ${RPC_CONN_CAPS_SIZE} bytes, got ${caps.byteLength}`);
  }
  return caps;
}

/** Packs a HELLO request (no caps: zeros, plain TCP). */
export function packHelloRequest(req: Partial<HelloRequest> = {}): Uint8Array {
  return new Writer(RPC_CONN_CAPS_SIZE).raw(capsOf("hello.conn_caps", req.connCaps)).done();
}

/** Unpacks a HELLO request. */
export function unpackHelloRequest(bytes: Uint8Array): HelloRequest {
  const r = new Reader(bytes, "hello_req");
  r.need("conn_caps", RPC_CONN_CAPS_SIZE);
  const connCaps = bytes.slice(0, RPC_CONN_CAPS_SIZE);
  r.pos += RPC_CONN_CAPS_SIZE;
  r.end();
  return { connCaps };
}

/** Packs a HELLO reply (default: this protocol's version, zero caps). */
export function packHelloResponse(rsp: Partial<HelloResponse> = {}): Uint8Array {
  return new Writer(4 + RPC_CONN_CAPS_SIZE)
    .u8("hello.major", rsp.major ?? RPC_PROTO_MAJOR)
    .u8("hello.minor", rsp.minor ?? RPC_PROTO_MINOR)
    .u8("hello.patch", rsp.patch ?? RPC_PROTO_PATCH)
    .u8("hello.padding", 0)
    .raw(capsOf("hello.conn_caps", rsp.connCaps))
    .done();
}

/** Unpacks a HELLO reply. */
export function unpackHelloResponse(bytes: Uint8Array): HelloResponse {
  const r = new Reader(bytes, "hello_rsp");
  const major = r.u8("major");
  const minor = r.u8("minor");
  const patch = r.u8("patch");
  r.u8("padding");
  r.need("conn_caps", RPC_CONN_CAPS_SIZE);
  const connCaps = bytes.slice(r.pos, r.pos + RPC_CONN_CAPS_SIZE);
  r.pos += RPC_CONN_CAPS_SIZE;
  r.end();
  return { major, minor, patch, connCaps };
}

/** Packs a u32 message: DEVICE_COUNT's reply; GET_ALIGNMENT, GET_MAX_SIZE, GET_DEVICE_MEMORY and
 * GRAPH_RECOMPUTE requests (the device index). */
export function packU32(field: string, value: number): Uint8Array {
  return new Writer(4).u32(field, value).done();
}

/** Unpacks a u32 message (see {@link packU32}). */
export function unpackU32(field: string, bytes: Uint8Array): number {
  const r = new Reader(bytes, field);
  const v = r.u32("value");
  r.end();
  return v;
}

/** Packs a u64 message: GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, GET_ALLOC_SIZE replies;
 * BUFFER_GET_BASE and FREE_BUFFER requests (the remote buffer). */
export function packU64(field: string, value: bigint | number): Uint8Array {
  return new Writer(8).u64(field, value).done();
}

/** Unpacks a u64 message (see {@link packU64}). */
export function unpackU64(field: string, bytes: Uint8Array): bigint {
  const r = new Reader(bytes, field);
  const v = r.u64("value");
  r.end();
  return v;
}

/** Packs a u8 message: SET_TENSOR_HASH and COPY_TENSOR replies (the result flag). */
export function packU8(field: string, value: number): Uint8Array {
  return new Writer(1).u8(field, value).done();
}

/** Unpacks a u8 message (see {@link packU8}). */
export function unpackU8(field: string, bytes: Uint8Array): number {
  const r = new Reader(bytes, field);
  const v = r.u8("value");
  r.end();
  return v;
}

/** ALLOC_BUFFER request. */
export interface AllocBufferRequest {
  /** Device index. */
  device: number;
  /** Bytes asked. */
  size: bigint;
}

/** Packs an ALLOC_BUFFER request. */
export function packAllocBufferRequest(req: AllocBufferRequest): Uint8Array {
  return new Writer(12).u32("alloc_buffer.device", req.device).u64("alloc_buffer.size", req.size)
    .done();
}

/** Unpacks an ALLOC_BUFFER request. */
export function unpackAllocBufferRequest(bytes: Uint8Array): AllocBufferRequest {
  const r = new Reader(bytes, "alloc_buffer_req");
  const req = { device: r.u32("device"), size: r.u64("size") };
  r.end();
  return req;
}

/** ALLOC_BUFFER reply: the server's handle (0: the allocation failed) and the buffer's size. */
export interface AllocBufferResponse {
  /** The server's buffer handle; 0 when it could not allocate. */
  remotePtr: bigint;
  /** The buffer's size in bytes. */
  remoteSize: bigint;
}

/** Packs an ALLOC_BUFFER reply. */
export function packAllocBufferResponse(rsp: AllocBufferResponse): Uint8Array {
  return new Writer(16).u64("alloc_buffer.remote_ptr", rsp.remotePtr)
    .u64("alloc_buffer.remote_size", rsp.remoteSize).done();
}

/** Unpacks an ALLOC_BUFFER reply. */
export function unpackAllocBufferResponse(bytes: Uint8Array): AllocBufferResponse {
  const r = new Reader(bytes, "alloc_buffer_rsp");
  const rsp = { remotePtr: r.u64("remote_ptr"), remoteSize: r.u64("remote_size") };
  r.end();
  return rsp;
}

/** BUFFER_CLEAR request: fill a whole remote buffer with one byte value. */
export interface BufferClearRequest {
  /** The server's buffer handle. */
  remotePtr: bigint;
  /** The byte value. */
  value: number;
}

/** Packs a BUFFER_CLEAR request. */
export function packBufferClearRequest(req: BufferClearRequest): Uint8Array {
  return new Writer(9).u64("buffer_clear.remote_ptr", req.remotePtr)
    .u8("buffer_clear.value", req.value).done();
}

/** Unpacks a BUFFER_CLEAR request. */
export function unpackBufferClearRequest(bytes: Uint8Array): BufferClearRequest {
  const r = new Reader(bytes, "buffer_clear_req");
  const req = { remotePtr: r.u64("remote_ptr"), value: r.u8("value") };
  r.end();
  return req;
}

/** GET_DEVICE_MEMORY reply. */
export interface DeviceMemory {
  /** Free bytes. */
  free: bigint;
  /** Total bytes. */
  total: bigint;
}

/** Packs a GET_DEVICE_MEMORY reply. */
export function packDeviceMemoryResponse(rsp: DeviceMemory): Uint8Array {
  return new Writer(16).u64("device_memory.free", rsp.free)
    .u64("device_memory.total", rsp.total).done();
}

/** Unpacks a GET_DEVICE_MEMORY reply. */
export function unpackDeviceMemoryResponse(bytes: Uint8Array): DeviceMemory {
  const r = new Reader(bytes, "device_memory_rsp");
  const rsp = { free: r.u64("free_mem"), total: r.u64("total_mem") };
  r.end();
  return rsp;
}

/** GET_ALLOC_SIZE request: a tensor and its 10 sources (empty tensors where absent). */
export interface GetAllocSizeRequest {
  /** Device index. */
  device: number;
  /** The tensor. */
  tensor: RpcTensor;
  /** Its sources, exactly 10 (missing ones as {@link emptyRpcTensor}). */
  srcs: RpcTensor[];
}

/** Packs a GET_ALLOC_SIZE request (fewer than 10 srcs are padded with empty tensors). */
export function packGetAllocSizeRequest(req: GetAllocSizeRequest): Uint8Array {
  if (req.srcs.length > GGML_MAX_SRC) {
    throw new RpcProtocolError("get_alloc_size.srcs", -1, `${req.srcs.length} > ${GGML_MAX_SRC}`);
  }
  const w = new Writer(RPC_REQUEST_SIZE[RpcCmd.GET_ALLOC_SIZE] as number);
  w.u32("get_alloc_size.device", req.device).tensor(req.tensor);
  for (let i = 0; i < GGML_MAX_SRC; i++) w.tensor(req.srcs[i] ?? emptyRpcTensor());
  return w.done();
}

/** Unpacks a GET_ALLOC_SIZE request. */
export function unpackGetAllocSizeRequest(bytes: Uint8Array): GetAllocSizeRequest {
  const r = new Reader(bytes, "get_alloc_size_req");
  const device = r.u32("device");
  const tensor = r.tensor("tensor");
  const srcs: RpcTensor[] = [];
  for (let i = 0; i < GGML_MAX_SRC; i++) srcs.push(r.tensor(`srcs[${i}]`));
  r.end();
  return { device, tensor, srcs };
}

/** Packs an INIT_TENSOR request. */
export function packInitTensorRequest(tensor: RpcTensor): Uint8Array {
  return new Writer(RPC_TENSOR_SIZE).tensor(tensor).done();
}

/** Unpacks an INIT_TENSOR request. */
export function unpackInitTensorRequest(bytes: Uint8Array): RpcTensor {
  const r = new Reader(bytes, "init_tensor_req");
  const t = r.tensor("tensor");
  r.end();
  return t;
}

/** MEMSET_TENSOR request: `size` bytes from `offset` in the tensor set to `value`. */
export interface MemsetTensorRequest {
  /** The tensor. */
  tensor: RpcTensor;
  /** Byte offset in the tensor. */
  offset: bigint;
  /** Bytes to set. */
  size: bigint;
  /** The byte value. */
  value: number;
}

/** Packs a MEMSET_TENSOR request. */
export function packMemsetTensorRequest(req: MemsetTensorRequest): Uint8Array {
  return new Writer(RPC_TENSOR_SIZE + 17).tensor(req.tensor).u64("memset.offset", req.offset)
    .u64("memset.size", req.size).u8("memset.value", req.value).done();
}

/** Unpacks a MEMSET_TENSOR request. */
export function unpackMemsetTensorRequest(bytes: Uint8Array): MemsetTensorRequest {
  const r = new Reader(bytes, "memset_tensor_req");
  const req = {
    tensor: r.tensor("tensor"),
    offset: r.u64("offset"),
    size: r.u64("size"),
    value: r.u8("value"),
  };
  r.end();
  return req;
}

/** SET_TENSOR_HASH request: the FNV-1a hash of data the server may have cached. */
export interface SetTensorHashRequest {
  /** The tensor. */
  tensor: RpcTensor;
  /** Byte offset in the tensor. */
  offset: bigint;
  /** {@link fnv1a64} of the data. */
  hash: bigint;
}

/** Packs a SET_TENSOR_HASH request. */
export function packSetTensorHashRequest(req: SetTensorHashRequest): Uint8Array {
  return new Writer(RPC_TENSOR_SIZE + 16).tensor(req.tensor).u64(
    "set_tensor_hash.offset",
    req.offset,
  )
    .u64("set_tensor_hash.hash", req.hash).done();
}

/** Unpacks a SET_TENSOR_HASH request. */
export function unpackSetTensorHashRequest(bytes: Uint8Array): SetTensorHashRequest {
  const r = new Reader(bytes, "set_tensor_hash_req");
  const req = { tensor: r.tensor("tensor"), offset: r.u64("offset"), hash: r.u64("hash") };
  r.end();
  return req;
}

/** GET_TENSOR request: `size` bytes from `offset` in the tensor (the reply is those bytes). */
export interface GetTensorRequest {
  /** The tensor. */
  tensor: RpcTensor;
  /** Byte offset in the tensor. */
  offset: bigint;
  /** Bytes asked. */
  size: bigint;
}

/** Packs a GET_TENSOR request. */
export function packGetTensorRequest(req: GetTensorRequest): Uint8Array {
  return new Writer(RPC_TENSOR_SIZE + 16).tensor(req.tensor).u64("get_tensor.offset", req.offset)
    .u64("get_tensor.size", req.size).done();
}

/**
 * The part of a GET_TENSOR request after its tensor (`offset`, `size`): for a client that keeps
 * the tensor's packed bytes and sends them before it.
 */
export function packGetTensorRange(offset: bigint, size: bigint): Uint8Array {
  return new Writer(16).u64("get_tensor.offset", offset).u64("get_tensor.size", size).done();
}

/** Unpacks a GET_TENSOR request. */
export function unpackGetTensorRequest(bytes: Uint8Array): GetTensorRequest {
  const r = new Reader(bytes, "get_tensor_req");
  const req = { tensor: r.tensor("tensor"), offset: r.u64("offset"), size: r.u64("size") };
  r.end();
  return req;
}

/** COPY_TENSOR request: src into dst, both in the server's buffers. */
export interface CopyTensorRequest {
  /** Source tensor. */
  src: RpcTensor;
  /** Destination tensor. */
  dst: RpcTensor;
}

/** Packs a COPY_TENSOR request. */
export function packCopyTensorRequest(req: CopyTensorRequest): Uint8Array {
  return new Writer(2 * RPC_TENSOR_SIZE).tensor(req.src).tensor(req.dst).done();
}

/** Unpacks a COPY_TENSOR request. */
export function unpackCopyTensorRequest(bytes: Uint8Array): CopyTensorRequest {
  const r = new Reader(bytes, "copy_tensor_req");
  const req = { src: r.tensor("src"), dst: r.tensor("dst") };
  r.end();
  return req;
}

// ---------------------------------------------------------------------------------------------
// Variable-size messages

/** Bytes before the data in a SET_TENSOR request: rpc_tensor, cache flag (u8), offset (u64). */
export const SET_TENSOR_HEADER_SIZE = RPC_TENSOR_SIZE + 1 + 8;

/** SET_TENSOR request: `data` written at `offset` in the tensor. */
export interface SetTensorRequest {
  /** The tensor. */
  tensor: RpcTensor;
  /** 1: the server (started with a cache dir) saves the data under its hash. */
  cacheFlag: number;
  /** Byte offset in the tensor. */
  offset: bigint;
  /** The bytes (a view into the message when unpacked; not copied). */
  data: Uint8Array;
}

/** Packs a SET_TENSOR request. */
export function packSetTensorRequest(req: SetTensorRequest): Uint8Array {
  return new Writer(SET_TENSOR_HEADER_SIZE + req.data.byteLength).tensor(req.tensor)
    .u8("set_tensor.cache_flag", req.cacheFlag).u64("set_tensor.offset", req.offset)
    .raw(req.data).done();
}

/** Unpacks a SET_TENSOR request; `data` is a view into `bytes`. */
export function unpackSetTensorRequest(bytes: Uint8Array): SetTensorRequest {
  const r = new Reader(bytes, "set_tensor_req");
  const tensor = r.tensor("tensor");
  const cacheFlag = r.u8("cache_flag");
  const offset = r.u64("offset");
  return { tensor, cacheFlag, offset, data: bytes.subarray(r.pos) };
}

/** A graph as GRAPH_COMPUTE carries it. */
export interface RpcGraph {
  /** Device index. */
  device: number;
  /** Node ids in compute order (ids of tensors in `tensors`; 0 entries are skipped by ggml). */
  nodes: bigint[];
  /** Every tensor the nodes reach (sources and view sources included), each once. */
  tensors: RpcTensor[];
}

/** Bytes of a GRAPH_COMPUTE payload with `nNodes` nodes and `nTensors` tensors. */
export function graphMessageSize(nNodes: number, nTensors: number): number {
  return 4 + 4 + 8 * nNodes + 4 + RPC_TENSOR_SIZE * nTensors;
}

/**
 * Packs a GRAPH_COMPUTE payload:
 * `| device u32 | n_nodes u32 | nodes u64[n_nodes] | n_tensors u32 | rpc_tensor[n_tensors] |`.
 */
export function packGraph(graph: RpcGraph): Uint8Array {
  const w = new Writer(graphMessageSize(graph.nodes.length, graph.tensors.length));
  w.u32("graph.device", graph.device).u32("graph.n_nodes", graph.nodes.length);
  for (const id of graph.nodes) w.u64("graph.nodes", id);
  w.u32("graph.n_tensors", graph.tensors.length);
  for (const t of graph.tensors) w.tensor(t);
  return w.done();
}

/**
 * Unpacks a GRAPH_COMPUTE payload. Counts are checked against the bytes before anything is
 * allocated, and the message must end exactly after the last tensor. Structure beyond the
 * framing (ids that resolve, acyclic sources) is the server's to check.
 */
export function unpackGraph(bytes: Uint8Array): RpcGraph {
  const r = new Reader(bytes, "graph");
  const device = r.u32("device");
  const nNodes = r.u32("n_nodes");
  // 8 * nNodes is at most 2^35: exact in a double, and checked before any array is made.
  r.need("nodes", 8 * nNodes + 4);
  const nodes: bigint[] = new Array<bigint>(nNodes);
  for (let i = 0; i < nNodes; i++) nodes[i] = r.u64(`nodes[${i}]`);
  const nTensors = r.u32("n_tensors");
  r.need("tensors", RPC_TENSOR_SIZE * nTensors);
  const tensors: RpcTensor[] = new Array<RpcTensor>(nTensors);
  for (let i = 0; i < nTensors; i++) tensors[i] = r.tensor(`tensors[${i}]`);
  r.end();
  return { device, nodes, tensors };
}

// ---------------------------------------------------------------------------------------------
// Hash

const FNV_OFFSET = 0xcbf29ce484222325n;

/**
 * FNV-1a 64 of `data`, as ggml-rpc's `fnv_hash` (the SET_TENSOR_HASH key). Computed on two
 * 32-bit halves so that large weights hash without a BigInt per byte.
 */
export function fnv1a64(data: Uint8Array, seed: bigint = FNV_OFFSET): bigint {
  // prime = 0x100000001b3 = 2^40 + 0x1b3: h * prime = h * 0x1b3 + (h << 40).
  let lo = Number(seed & 0xffff_ffffn);
  let hi = Number(seed >> 32n);
  for (let i = 0; i < data.length; i++) {
    lo ^= data[i]!;
    // (hi:lo) * 0x1b3: the low 32 bits' product split in 16-bit halves to stay exact.
    const loLo = (lo & 0xffff) * 0x1b3;
    const loHi = (lo >>> 16) * 0x1b3;
    const newLo = loLo + (loHi & 0xffff) * 0x10000;
    const carry = Math.floor(loHi / 0x10000) + Math.floor(newLo / 0x1_0000_0000);
    // (h << 40) adds lo << 8 to the high word.
    hi = (Math.imul(hi, 0x1b3) + carry + (lo << 8)) >>> 0;
    lo = newLo >>> 0;
  }
  return (BigInt(hi) << 32n) | BigInt(lo);
}
