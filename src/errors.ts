/**
 * Typed errors. Build-time errors (shapes, types) are thrown by op builders; native errors are
 * the core's status codes turned into exceptions that carry the core's message.
 * @module
 */

/** Base class of every error Graft throws. */
export class GraftError extends Error {
  /** The error class name. */
  override name = "GraftError";
}

/** Shapes that an op cannot combine; the message names the op and the shapes. */
export class ShapeError extends GraftError {
  /** The error class name. */
  override name = "ShapeError";
}

/** A dtype an op does not accept; the message names the op and the dtypes. */
export class DTypeError extends GraftError {
  /** The error class name. */
  override name = "DTypeError";
}

/** An object used after `dispose()`, or disposed twice. */
export class DisposedError extends GraftError {
  /** The error class name. */
  override name = "DisposedError";
}

/** A read or write outside a tensor or buffer. */
export class OutOfBoundsError extends GraftError {
  /** The error class name. */
  override name = "OutOfBoundsError";
}

/** A tensor that has no memory yet, or memory on another backend than the one asked. */
export class PlacementError extends GraftError {
  /** The error class name. */
  override name = "PlacementError";
}

/** A plan used with a graph it was not made for, or after a buffer it uses was freed. */
export class StalePlanError extends GraftError {
  /** The error class name. */
  override name = "StalePlanError";
}

/**
 * An argument whose value no call accepts (a size that is negative, fractional, NaN, a BigInt
 * or above 2^53, a thread count out of range...); the message names the argument and value.
 */
export class ArgumentError extends GraftError {
  /** The error class name. */
  override name = "ArgumentError";
}

/**
 * An object is in use by asynchronous work (a compute in flight): await that work (for a CPU
 * backend, `synchronize()`) and try again. Nothing was freed or changed.
 */
export class BusyError extends GraftError {
  /** The error class name. */
  override name = "BusyError";
}

/**
 * A GGUF file that is not valid (truncated, counts larger than the file, bad dims, unknown
 * types, tensor data outside the file...): `field` names what was being read and `offset` the
 * byte where it starts.
 */
export class GGUFError extends GraftError {
  /** The error class name. */
  override name = "GGUFError";
  /** What was being read: "header.magic", "metadata[3].value", "tensor[12].dims"... */
  readonly field: string;
  /** The byte offset in the file where that field starts. */
  readonly offset: number;
  /** A GGUF error at `field`, byte `offset`. */
  constructor(field: string, offset: number, message: string) {
    super(`GGUF ${field} at byte ${offset}: ${message}`);
    this.field = field;
    this.offset = offset;
  }
}

/**
 * A write into read-only memory: a tensor whose memory is a file mapped read-only (weights
 * loaded with `GGUFFile.load(cpu)`, mapped by default) cannot be set, copied into or computed
 * into. Load with `{ mmap: false }` for weights of your own to change.
 */
export class ReadOnlyError extends GraftError {
  /** The error class name. */
  override name = "ReadOnlyError";
}

/**
 * A file could not be opened, examined or mapped by the native core (missing, unreadable, a
 * directory, empty), or changed since it was opened; the message names the path and the OS error.
 */
export class FileError extends GraftError {
  /** The error class name. */
  override name = "FileError";
}

/** The native library could not be found or loaded, or has another ABI version. */
export class LibraryLoadError extends GraftError {
  /** The error class name. */
  override name = "LibraryLoadError";
}

/**
 * A ggml RPC message that breaks the protocol: too short, too long, a count or size the bytes
 * cannot hold, an unknown command, a reply of the wrong size. `field` names what was being read
 * and `offset` the byte in the message (or -1 where the message as a whole is wrong).
 */
export class RpcProtocolError extends GraftError {
  /** The error class name. */
  override name = "RpcProtocolError";
  /** What was being read: "graph.n_nodes", "tensors[3].name", "reply.size"... */
  readonly field: string;
  /** Byte offset in the message where `field` starts; -1 for the whole message. */
  readonly offset: number;
  /** A protocol error at `field`, byte `offset`. */
  constructor(field: string, offset: number, message: string) {
    super(`RPC ${field}${offset >= 0 ? ` at byte ${offset}` : ""}: ${message}`);
    this.field = field;
    this.offset = offset;
  }
}

/**
 * An RPC connection that could not be made (refused, unreachable) or broke (the peer closed it
 * or reset it mid-request). The protocol has no error replies: a server that refuses a request
 * closes the connection, so this is also how a refused request shows.
 */
export class RpcConnectionError extends GraftError {
  /** The error class name. */
  override name = "RpcConnectionError";
}

/** An RPC peer that did not answer within the time-out; the connection is closed. */
export class RpcTimeoutError extends RpcConnectionError {
  /** The error class name. */
  override name = "RpcTimeoutError";
}

/** Status codes of the Zig core (`zig/node.zig`, `Status`). */
export const Status = {
  ok: 0,
  invalidArgument: -1,
  outOfMemory: -2,
  outOfBounds: -3,
  invalidHandle: -4,
  unsupported: -5,
  shapeMismatch: -6,
  outOfSpace: -7,
  limitReached: -8,
  busy: -9,
  stalePlan: -10,
  ioError: -11,
  readOnly: -12,
} as const;

/** An error status returned by the native core. */
export class NativeError extends GraftError {
  /** The error class name. */
  override name = "NativeError";
  /** The core's status code (see {@link Status}). */
  readonly status: number;
  /** An error for a native status code. */
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** The allocator or buffer is too small; `neededBytes` says how much was asked. */
export class OutOfSpaceError extends NativeError {
  /** The error class name. */
  override name = "OutOfSpaceError";
  /** Bytes the failed request needed (after alignment), when known. */
  readonly neededBytes: number | undefined;
  /** An out-of-space error; `neededBytes` is the aligned size asked for. */
  constructor(status: number, message: string, neededBytes?: number) {
    super(status, message);
    this.neededBytes = neededBytes;
  }
}

/** A named fixed limit of the core was reached; the message names it. */
export class LimitError extends NativeError {
  /** The error class name. */
  override name = "LimitError";
}

/** Builds the exception for a native status code. */
export function nativeError(status: number, message: string): GraftError {
  switch (status) {
    case Status.outOfBounds:
      return new OutOfBoundsError(message);
    case Status.invalidHandle:
      return new DisposedError(message);
    case Status.shapeMismatch:
      return new ShapeError(message);
    case Status.outOfSpace:
      return new OutOfSpaceError(status, message);
    case Status.limitReached:
      return new LimitError(status, message);
    case Status.stalePlan:
      return new StalePlanError(message);
    case Status.busy:
      return new BusyError(message);
    case Status.ioError:
      return new FileError(message);
    case Status.readOnly:
      return new ReadOnlyError(message);
    default:
      return new NativeError(status, message);
  }
}
