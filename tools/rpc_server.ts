/**
 * `deno task rpc-server`: Graft's server for llama.cpp's ggml RPC protocol 7.0.0, with Graft's
 * CPU backend behind it. Flags as llama.cpp's `ggml-rpc-server`:
 *
 *   deno task rpc-server [-H HOST] [-p PORT] [-t THREADS] [-m MEM_MIB] [-c CACHE_DIR]
 *     [--max-clients N] [--idle-timeout SECONDS]
 *
 * Binds 127.0.0.1:50052 by default. The protocol has no authentication: anyone who reaches
 * the port can allocate memory and run graphs, so bind another address only on a trusted
 * network. `-m` caps what the server allocates for its clients, together and so for any one
 * (MiB, default 8192), and is the memory GET_DEVICE_MEMORY reports; `--max-clients` caps the
 * clients served at once (default 16); `--idle-timeout` closes a connection that sends nothing
 * for that many seconds (default 0: never, as ggml-rpc-server, whose clients keep an idle
 * connection open between requests and abort when it closes); `-c` enables the SET_TENSOR_HASH cache in that directory.
 * @module
 */

import { parseArgs } from "node:util";
import {
  DEFAULT_MAX_CLIENTS,
  DEFAULT_MEMORY_CAP,
  IDLE_TIMEOUT_MAX,
  RpcServer,
} from "../src/rpc/server/server.ts";

const USAGE =
  `usage: deno task rpc-server [-H HOST] [-p PORT] [-t THREADS] [-m MEM_MIB] [-c CACHE_DIR]
  -H, --host     address to bind (default 127.0.0.1; the protocol has NO authentication)
  -p, --port     TCP port (default 50052)
  -t, --threads  CPU threads per client (default: all cores)
  -m, --mem      memory for all clients together, MiB (default ${DEFAULT_MEMORY_CAP / 1024 ** 2})
  --max-clients  clients served at once (default ${DEFAULT_MAX_CLIENTS})
  --idle-timeout close a connection silent for this many seconds (default 0: never)
  -c, --cache    directory of the SET_TENSOR_HASH cache (default: none)`;

function positiveInt(name: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a whole number`);
  return n;
}

async function main(args: string[]): Promise<number> {
  const { values: v } = parseArgs({
    args,
    options: {
      host: { type: "string", short: "H" },
      port: { type: "string", short: "p" },
      threads: { type: "string", short: "t" },
      mem: { type: "string", short: "m" },
      cache: { type: "string", short: "c" },
      "max-clients": { type: "string" },
      "idle-timeout": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: false,
  });
  if (v.help) {
    console.log(USAGE);
    return 0;
  }
  const mem = positiveInt("--mem", v.mem);
  const threads = positiveInt("--threads", v.threads);
  const maxClients = positiveInt("--max-clients", v["max-clients"]);
  const idle = v["idle-timeout"] === undefined ? undefined : Number(v["idle-timeout"]);
  if (idle !== undefined && !(idle >= 0 && idle <= IDLE_TIMEOUT_MAX)) {
    throw new Error(`--idle-timeout must be seconds in [0, ${IDLE_TIMEOUT_MAX}]`);
  }
  const server = RpcServer.listen({
    host: v.host ?? "127.0.0.1",
    port: positiveInt("--port", v.port) ?? 50052,
    ...(threads ? { threads } : {}),
    ...(mem ? { memoryCap: mem * 1024 ** 2 } : {}),
    ...(maxClients ? { maxClients } : {}),
    ...(idle ? { idleTimeout: idle } : {}),
    ...(v.cache ? { cacheDir: v.cache } : {}),
  });
  // Ready line on stdout (tests wait for it).
  console.log(`listening on ${server.host}:${server.port}`);
  Deno.addSignalListener("SIGINT", () => void server.close());
  Deno.addSignalListener("SIGTERM", () => void server.close());
  await server.finished;
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error((error as Error).message);
    Deno.exit(2);
  }
}
