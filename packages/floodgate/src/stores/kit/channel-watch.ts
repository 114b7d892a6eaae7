/**
 * What a store's `watch` needs of a notification connection: subscribe to a channel (resolving once the
 * server confirmed), and end the subscription.
 */
export interface ChannelSubscriber {
  subscribe(channel: string, listener: (message: string) => void): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
}

/** How long a key's channel stays subscribed after its last waiter in this process, ms. */
const SUBSCRIPTION_LINGER_MS = 2000;

/** A permit store's `watch` and `watching` (see `PermitStore`). */
export interface ChannelWatch {
  watch(key: string, listener: (ticket: number) => void): Promise<() => void>;
  watching(key: string, listener: (ticket: number) => void): (() => void) | undefined;
}

/**
 * A permit store's `watch` and `watching` over `subscriber`: one subscription per key channel
 * (`channelOf(key)`) while this process has listeners on it, shared by them; every message that is a whole
 * number is a ticket. The channel is unsubscribed {@link SUBSCRIPTION_LINGER_MS} after the last listener
 * left, unless another came meanwhile (a key waited on once is often waited on again soon: the linger
 * spares an unsubscribe and a subscribe, and its round trip, per wait on a busy key).
 */
export function channelWatch(subscriber: ChannelSubscriber, channelOf: (key: string) => string): ChannelWatch {
  interface Channel {
    readonly listeners: Set<(ticket: number) => void>;
    ready: Promise<void>;
    /** True once the server confirmed the subscription. */
    live: boolean;
    /** Set while the channel has no listener: it is unsubscribed when this fires. */
    linger: ReturnType<typeof setTimeout> | undefined;
  }
  const channels = new Map<string, Channel>();
  // An unsubscribe still on its way, per channel: a new subscription waits for it (else the late
  // unsubscribe would end the new one).
  const leaving = new Map<string, Promise<void>>();
  const open = (name: string): Channel => {
    const created: Channel = { listeners: new Set(), ready: Promise.resolve(), live: false, linger: undefined };
    channels.set(name, created);
    created.ready = (leaving.get(name) ?? Promise.resolve())
      .then(() =>
        subscriber.subscribe(name, (message) => {
          const ticket = /^[0-9]{1,16}$/.test(message) ? Number(message) : Number.NaN;
          if (!Number.isSafeInteger(ticket)) return;
          for (const each of [...created.listeners]) each(ticket);
        }),
      )
      .then(
        () => {
          created.live = true;
        },
        (error: unknown) => {
          if (channels.get(name) === created) channels.delete(name);
          throw error;
        },
      );
    return created;
  };
  const close = (name: string, joined: Channel) => {
    joined.linger = undefined;
    if (joined.listeners.size > 0 || channels.get(name) !== joined) return;
    channels.delete(name);
    // Unsubscribing can fail (a closed connection): the channel is gone from this process either way.
    const gone = joined.ready
      .then(() => subscriber.unsubscribe(name))
      .catch(() => {})
      .finally(() => {
        if (leaving.get(name) === gone) leaving.delete(name);
      });
    leaving.set(name, gone);
  };
  /** Adds `listener` to the channel; the function that takes it out. */
  const join = (name: string, joined: Channel, listener: (ticket: number) => void): (() => void) => {
    const entry = (ticket: number) => listener(ticket);
    if (joined.linger !== undefined) clearTimeout(joined.linger);
    joined.linger = undefined;
    joined.listeners.add(entry);
    return () => {
      joined.listeners.delete(entry);
      if (joined.listeners.size > 0 || channels.get(name) !== joined || joined.linger !== undefined) return;
      joined.linger = setTimeout(() => close(name, joined), SUBSCRIPTION_LINGER_MS);
      joined.linger.unref?.();
    };
  };
  return {
    async watch(key, listener) {
      const name = channelOf(key);
      const joined = channels.get(name) ?? open(name);
      const unwatch = join(name, joined, listener);
      try {
        await joined.ready;
      } catch (error) {
        unwatch();
        throw error;
      }
      return unwatch;
    },
    watching(key, listener) {
      const name = channelOf(key);
      const channel = channels.get(name);
      return channel?.live === true ? join(name, channel, listener) : undefined;
    },
  };
}
