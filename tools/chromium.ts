/**
 * Where the headless browser runs from: Debian's `chromium` (apt), or the binary `CHROMIUM`
 * names. The browser test (tests/wasm_browser_test.ts) and `deno task bench:web` both launch it
 * through puppeteer-core.
 * @module
 */

/** The Chromium binary's path; throws saying how to install it when there is none. */
export function chromiumPath(): string {
  const path = Deno.env.get("CHROMIUM") ?? "/usr/bin/chromium";
  try {
    Deno.statSync(path);
  } catch {
    throw new Error(
      `no Chromium at ${path}: install it (apt-get install chromium) or set CHROMIUM`,
    );
  }
  return path;
}
