/**
 * `deno task web`: serves the web page (web/index.html) and the bundle (dist/, made by
 * `deno task bundle`) on localhost, with the headers that make the page cross-origin isolated
 * (COOP same-origin, COEP require-corp: what SharedArrayBuffer, and so a threaded WebAssembly
 * core, needs) and the wasm MIME type (for streaming compilation).
 *
 *   deno task web [--port 8123]
 * @module
 */

const root = new URL("../", import.meta.url);

const TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  map: "application/json",
  wasm: "application/wasm",
  css: "text/css; charset=utf-8",
};

/** Only these folders are served: the page and the bundle. */
const SERVED = ["web/", "dist/"];

/** The response for `pathname`: a file of web/ or dist/, or 404. */
export async function serveFile(pathname: string): Promise<Response> {
  const path = pathname === "/" ? "web/index.html" : decodeURIComponent(pathname.slice(1));
  const headers = {
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-embedder-policy": "require-corp",
    "cache-control": "no-store",
  };
  if (path.includes("..") || !SERVED.some((folder) => path.startsWith(folder))) {
    return new Response("not found", { status: 404, headers });
  }
  try {
    const body = await Deno.readFile(new URL(path, root));
    const type = TYPES[path.split(".").pop() ?? ""] ?? "application/octet-stream";
    return new Response(body, { headers: { ...headers, "content-type": type } });
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      return new Response("not found", { status: 404, headers });
    }
    throw error;
  }
}

/** Serves on `port` (0: any free port) until the returned server is shut down. */
export function startServer(port: number, quiet = false): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve(
    {
      hostname: "127.0.0.1",
      port,
      onListen: ({ port }) => {
        if (!quiet) console.log(`Graft web page: http://127.0.0.1:${port}/`);
      },
    },
    (request) => serveFile(new URL(request.url).pathname),
  );
}

if (import.meta.main) {
  const at = Deno.args.indexOf("--port");
  startServer(at >= 0 ? Number(Deno.args[at + 1]) : 8123);
}
