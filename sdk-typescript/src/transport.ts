import * as grpc from "@grpc/grpc-js";
import { type ApiKey, parseServer, pem, type TlsOptions } from "./config.js";
import {
  CancelledError,
  ConfigError,
  fromStatus,
  isTlsFailure,
  type RailyardError,
} from "./errors.js";
import { backoff, isTransient, type RetryPolicy, sleep } from "./retry.js";

/** One RPC of a generated service definition (`HistoryService.startRun` ...). */
export interface Method<Req, Res> {
  path: string;
  requestSerialize: (value: Req) => Buffer;
  responseDeserialize: (value: Buffer) => Res;
}

/** Options every call takes. */
export interface CallOptions {
  /** The call's deadline in milliseconds (default: the client's `requestTimeoutMs`). */
  timeoutMs?: number;
  /** Aborting it cancels the call (rejected with `CancelledError`). */
  signal?: AbortSignal;
}

const MAX_MESSAGE_BYTES = 64 << 20;

/** The channel to one server, with the credentials every call carries. */
export class Transport {
  readonly url: string;
  readonly #client: grpc.Client;
  readonly #apiKey: ApiKey | undefined;
  readonly #retry: RetryPolicy;
  readonly #timeoutMs: number;

  constructor(
    url: string,
    opts: { apiKey?: ApiKey; tls?: TlsOptions; retry: RetryPolicy; requestTimeoutMs: number },
  ) {
    const { target, tls } = parseServer(url);
    this.url = url;
    this.#apiKey = opts.apiKey;
    this.#retry = opts.retry;
    this.#timeoutMs = opts.requestTimeoutMs;
    const channelOptions: grpc.ChannelOptions = {
      "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
      "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
      "grpc.keepalive_time_ms": 20_000,
      "grpc.keepalive_permit_without_calls": 1,
    };
    let creds: grpc.ChannelCredentials;
    if (tls) {
      const t = opts.tls ?? {};
      if ((t.cert === undefined) !== (t.key === undefined)) {
        throw new ConfigError("TLS: a client certificate needs its key, and a key its certificate");
      }
      creds = grpc.credentials.createSsl(
        t.ca === undefined ? null : pem(t.ca, "TLS CA"),
        t.key === undefined ? null : pem(t.key, "TLS client key"),
        t.cert === undefined ? null : pem(t.cert, "TLS client certificate"),
      );
      if (t.serverName) channelOptions["grpc.ssl_target_name_override"] = t.serverName;
    } else {
      const t = opts.tls;
      if (t && (t.ca !== undefined || t.cert !== undefined || t.key !== undefined)) {
        throw new ConfigError(
          `invalid server address "${url}": TLS settings were given: use an https:// URL`,
        );
      }
      creds = grpc.credentials.createInsecure();
    }
    this.#client = new grpc.Client(target, creds, channelOptions);
  }

  close(): void {
    this.#client.close();
  }

  #metadata(): grpc.Metadata {
    const md = new grpc.Metadata();
    if (this.#apiKey) md.set("authorization", `Bearer ${this.#apiKey.expose()}`);
    return md;
  }

  /** One try of a unary call. */
  once<Req, Res>(
    method: Method<Req, Res>,
    req: Req,
    opts: CallOptions = {},
    extraMs = 0,
  ): Promise<Res> {
    const timeout = (opts.timeoutMs ?? this.#timeoutMs) + extraMs;
    return new Promise<Res>((resolve, reject) => {
      if (opts.signal?.aborted) {
        reject(
          new CancelledError("the call was aborted before it was sent", grpc.status.CANCELLED),
        );
        return;
      }
      const call = this.#client.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        req,
        this.#metadata(),
        { deadline: Date.now() + timeout },
        (err: grpc.ServiceError | null, res?: Res) => {
          opts.signal?.removeEventListener("abort", onAbort);
          if (err) reject(this.error(err));
          else resolve(res as Res);
        },
      );
      const onAbort = () => call.cancel();
      opts.signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** A unary call that may be repeated: transient errors are retried with backoff. */
  async call<Req, Res>(
    method: Method<Req, Res>,
    req: Req,
    opts: CallOptions = {},
    extraMs = 0,
  ): Promise<Res> {
    for (let k = 0; ; k++) {
      try {
        return await this.once(method, req, opts, extraMs);
      } catch (e) {
        const err = e as RailyardError;
        const cause = err.cause as grpc.ServiceError | undefined;
        const retry =
          k + 1 < Math.max(1, this.#retry.maxAttempts) &&
          isTransient(err.code, cause?.details ?? err.message) &&
          !isTlsFailure(cause?.details ?? err.message) &&
          !opts.signal?.aborted;
        if (!retry) throw err;
        await sleep(backoff(this.#retry, k), opts.signal).catch(() => {
          throw err;
        });
      }
    }
  }

  /** A server stream as an async iterator; ends when the server ends it. */
  async *stream<Req, Res>(
    method: Method<Req, Res>,
    req: Req,
    signal?: AbortSignal,
  ): AsyncGenerator<Res> {
    const call = this.#client.makeServerStreamRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      req,
      this.#metadata(),
      {},
    );
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const item of call) yield item as Res;
    } catch (e) {
      if (signal?.aborted) return;
      throw this.error(e as grpc.ServiceError);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
  }

  error(err: grpc.ServiceError): RailyardError {
    return fromStatus(err, this.url);
  }
}
