declare module 'reconciled:runtime/settings@0.1.3' {
  /**
   * The settings as JSON text: always an object, `{}` when none were given. They come from
   * whoever deploys the module (a `[[guest]]`'s `settings` in the host config, or a
   * `<stem>.settings.json` key beside a ConfigMap module), so one module can run twice with
   * different settings; they are fixed for the life of a version (new settings are a
   * reload). Not callable from `describe`, like every import. The call counts against the
   * host-call limit like any other.
   */
  export function get(): string;
}
