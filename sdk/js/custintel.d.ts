// Type declarations for custintel.js 1.0.0, the browser tracker of the custintel Ingest API.
// The script defines `window.custintel`; with a bundler, `import "custintel-js"` once and use it.

export {};

declare global {
  namespace CustIntel {
    /** Options of `init`. */
    interface Options {
      /** Base URL of the custintel service, e.g. "https://custintel.example.com". Default: the
       * origin the script was loaded from. */
      apiHost?: string;
      /** A `pageview` on load and on URL changes (pushState, replaceState, popstate). Default true. */
      capturePageviews?: boolean;
      /** A `form` event on every form submit, sensitive fields left out in the page. Default false. */
      captureForms?: boolean;
      /** `engagement` events (active and total time per session). Default true. */
      captureEngagement?: boolean;
      /** How often queued events are sent, in ms. Default 2000. */
      flushIntervalMs?: number;
      /** Treat `navigator.doNotTrack === "1"` (or Global Privacy Control) as opted out. Default false. */
      respectDoNotTrack?: boolean;
      /** Log what is captured and sent to the console. Default false. */
      debug?: boolean;
    }

    /** Values of a custom event's properties (other values are sent as their JSON text). */
    type PropertyValue = string | number | boolean | null;

    /** JSON-serializable traits of a user or customer. */
    type Traits = Record<string, unknown>;

    /** The argument of `identify`: `email` or `userId` is required. */
    interface Identity {
      email?: string;
      userId?: string;
      traits?: Traits;
      /** The account (customer) the user belongs to; kept as `customerIdentity`. */
      customerId?: string;
      customerTraits?: Traits;
    }

    /** Overrides of the automatic `pageview` fields. */
    interface PageProperties {
      title?: string;
      url?: string;
      path?: string;
      referrer?: string;
    }

    interface Tracker {
      /** "1.0.0" */
      readonly version: string;
      /** Starts tracking for a public key (`pk_...`). Called by itself when the script tag has
       * `data-key`. Calls made before it are queued and replayed. */
      init(publicKey: string, options?: Options): void;
      /** Sends a `pageview` (sent by itself unless `capturePageviews` is false). */
      page(properties?: PageProperties): void;
      /** Sends a `custom` event named `eventName`. */
      track(eventName: string, properties?: Record<string, PropertyValue | object | undefined>): void;
      /** Sends an `identify` event; the user (and customer) go with every later batch. */
      identify(identity: Identity): void;
      /** Sets the customer (account) sent with every later batch as `customerIdentity`. */
      group(customerId: string, customerTraits?: Traits): void;
      /** Forgets the identity and starts a new visitorId and session (call it on logout). */
      reset(): void;
      /** Sends the queued events now; resolves when done (or when the API could not be reached). */
      flush(): Promise<void>;
      /** Stops tracking on this browser and clears the queue; remembered in localStorage. */
      optOut(): void;
      /** Undoes `optOut`. */
      optIn(): void;
      /** Whether nothing is being tracked (opted out, or Do Not Track with `respectDoNotTrack`). */
      isOptedOut(): boolean;
      /** The anonymous visitor id (a UUID) sent with every batch; null before `init`. */
      getVisitorId(): string | null;
    }
  }

  interface Window {
    custintel: CustIntel.Tracker;
  }

  // eslint-disable-next-line no-var
  var custintel: CustIntel.Tracker;
}
