declare module 'reconciled:runtime/trace@0.1.3' {
  /**
   * Opens a span named `name`; returns its handle (never 0 for a span opened).
   */
  export function open(name: string): number;
  /**
   * Sets attribute `key` to `value` on open span `span`; ignored for a handle that names no
   * open span.
   */
  export function setAttribute(span: number, key: string, value: string): void;
  /**
   * Closes `span`, and any span opened inside it still open; with `error`, the span is
   * marked failed with that message. Spans still open when the call returns are closed then.
   */
  export function close(span: number, error: string | undefined): void;
}
