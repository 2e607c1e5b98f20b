/**
 * Progress of a long benchmark on a terminal: one line on stderr, rewritten in place
 * (`[3/12] sgemm n=1024 threads=2`), cleared when done. The cursor is left at the line's start,
 * so the next result line (on stdout, the same terminal) writes over it. Nothing at all when stderr is not a terminal
 * (CI logs, pipes), so the `perf` lines on stdout stay the only output there.
 * @module
 */

const encoder = new TextEncoder();

/** A progress line over `total` steps; `step(label)` before each, `done()` after the last. */
export class Progress {
  readonly #total: number;
  readonly #tty: boolean;
  #done = 0;

  /** `total` steps; `enabled` defaults to whether stderr is a terminal. */
  constructor(total: number, enabled: boolean = Deno.stderr.isTerminal()) {
    this.#total = total;
    this.#tty = enabled;
  }

  /** Shows that the next step, `label`, is running. */
  step(label: string): void {
    this.#done++;
    this.#write(`\r\x1b[2K[${this.#done}/${this.#total}] ${label}\r`);
  }

  /** Clears the line. */
  done(): void {
    this.#write("\r\x1b[2K");
  }

  #write(text: string): void {
    if (this.#tty) Deno.stderr.writeSync(encoder.encode(text));
  }
}
