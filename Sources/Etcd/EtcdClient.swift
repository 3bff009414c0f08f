// A small etcd v3 client: KV.Range, KV.Txn, KV.Compact, Watch.Watch and Auth.Authenticate,
// over etcd's JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/watch`, ...) with
// AsyncHTTPClient, on plain HTTP or on TLS (swift-nio-ssl, through AsyncHTTPClient).
//
// Why the gateway and not gRPC: it is part of every etcd v3 server (3.4 included), it
// needs no generated code and no protoc plugin in the build, and its three calls are all
// this store uses. What it costs: JSON and base64 instead of protobuf (a few microseconds
// per request against a network round trip and a Raft commit), and one HTTP request per
// call instead of multiplexed streams (AsyncHTTPClient keeps connections alive, so a call
// is one request on an open connection).
//
// Failover: a call goes to the endpoint that answered last; when no connection can be made
// (nothing was sent) the next endpoint is tried. A transaction whose request was sent is
// never resent: its outcome is unknown (EtcdError.commitOutcomeUnknown). A TLS handshake
// that fails (or an alert the server sends in place of an answer) wrote nothing: it is
// EtcdError.tls, never a retry in clear text.
//
// Authentication: with credentials, the first call gets a token (Auth.Authenticate) and
// every request carries it (`Authorization`). A request etcd refuses for its token (expired,
// or issued before an auth change) was not applied, so the client gets a new token and
// sends it again, up to three times.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

final class EtcdClient: Sendable {
    let endpoints: [String]
    let options: EtcdOptions
    /// The store's prefix, as errors name it.
    let prefix: String
    private let http: HTTPClient
    private let preferred = Mutex(0)
    /// The TLS every request uses: set for `https://` endpoints, nil for `http://` ones.
    private let tls: TLSConfiguration?
    /// The token of the last authentication (with credentials only).
    private let token = Mutex<String?>(nil)

    init(endpoints: [String], options: EtcdOptions, prefix: String = "") throws(EtcdError) {
        guard !endpoints.isEmpty else { throw .invalidConfiguration("no endpoint was given; pass etcd's client URL, such as http://127.0.0.1:2379") }
        var schemes: Set<String> = []
        for endpoint in endpoints {
            guard let url = URL(string: endpoint), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
                throw .invalidConfiguration("endpoint \"\(endpoint)\" is not an http:// or https:// URL of etcd's client port")
            }
            schemes.insert(scheme)
        }
        guard schemes.count == 1 else {
            throw .invalidConfiguration("the endpoints mix http:// and https:// (\(endpoints.joined(separator: ", "))); give every member's URL with the scheme its client port serves")
        }
        if schemes.contains("https") {
            tls = try Self.configuration(options.tls)
        } else {
            guard options.tls.isEmpty else {
                throw .invalidConfiguration("EtcdOptions.tls names certificate files but the endpoints are http://, which would send everything in clear text; give the https:// URLs of etcd's client port")
            }
            tls = nil
        }
        self.endpoints = endpoints.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.options = options
        self.prefix = prefix
        http = Self.sharedHTTP
    }

    /// The client side of TLS from `options`: the CAs to trust (the system's when no file is
    /// given), the server's name checked against its certificate, and this client's
    /// certificate when one is given. Every file is read now, so a missing or malformed one is
    /// named at open.
    private static func configuration(_ options: EtcdTLS) throws(EtcdError) -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.certificateVerification = .fullVerification
        if let file = options.trustedCAFile {
            do { configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(file)) } catch {
                throw .invalidConfiguration("the CA file \(file) could not be read as PEM certificates: \(error)")
            }
        }
        switch (options.certificateFile, options.keyFile) {
        case (nil, nil):
            break
        case let (certificate?, key?):
            do {
                configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) }
            } catch {
                throw .invalidConfiguration("the client certificate file \(certificate) could not be read as PEM: \(error)")
            }
            do { configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)) } catch {
                throw .invalidConfiguration("the client key file \(key) could not be read as a PEM private key: \(error)")
            }
        default:
            throw .invalidConfiguration("EtcdTLS needs both certificateFile and keyFile for a client certificate, or neither")
        }
        return configuration
    }

    /// One client for every store of the process, never shut down (so a dropped store
    /// needs no close): no read timeout, since a watch may be quiet for hours and every
    /// other call has its own deadline; a connection that cannot be made fails at once
    /// instead of being retried until the deadline, so the next endpoint is tried. Each
    /// store's watch holds a connection for as long as the store is open, so the pool's
    /// limit per host is high enough not to make calls queue behind them. HTTP/1.1 only, over
    /// TLS too: async-http-client 1.37's HTTP/2 handler traps when a stream is reset after its
    /// response ended (swift-server/async-http-client#922, open), which a watch cut by a
    /// member's compaction or restart can meet; it took a test process down once in three
    /// full runs of the suite.
    private static let sharedHTTP: HTTPClient = {
        var configuration = HTTPClient.Configuration(timeout: HTTPClient.Configuration.Timeout(connect: .seconds(5), read: nil))
        configuration.httpVersion = .http1Only
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 1_024
        return HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
    }()

    // MARK: Calls

    /// KV.Range. Reads are idempotent: any failure moves on to the next endpoint.
    func range(_ request: RangeRequest) -> EventLoopFuture<RangeResponse> {
        call("/v3/kv/range", request, sent: readFailure)
    }

    /// KV.Txn. Once the request may have reached a server, a failure is
    /// `commitOutcomeUnknown` unless etcd answered with a refusal that writes nothing
    /// (`classify`); an answer that cannot be read is unknown too.
    func txn(_ body: [UInt8]) -> EventLoopFuture<TxnResponse> {
        call("/v3/kv/txn", body: body) { endpoint, error in
            if let gateway = error as? GatewayError { return Self.classify(gateway, outcomeUnknownAt: endpoint) }
            return EtcdError.commitOutcomeUnknown(endpoint: endpoint, cause: "\(error)")
        }
    }

    /// KV.Txn for a transaction that cannot write (its success branch never runs): its
    /// failures are a read's, never an unknown outcome.
    func probe(_ body: [UInt8]) -> EventLoopFuture<TxnResponse> {
        call("/v3/kv/txn", body: body, sent: readFailure)
    }

    /// KV.Compact: discards the history below `revision` (etcd keeps every key's latest
    /// value). Idempotent, as a read is.
    func compact(_ revision: Int64) -> EventLoopFuture<CompactionResponse> {
        call("/v3/kv/compaction", CompactionRequest(revision: EtcdInt(revision)), sent: readFailure)
    }

    /// Watch.Watch from `request`: calls `onMessage` with each message, in order, on an
    /// event loop. The returned future ends with the stream (closed by etcd, an error, or
    /// `cancel` of the task). With credentials, gets a token first when it has none
    /// (blocking: call it off the cooperative pool and off event loops).
    ///
    /// The watch asks for a leader (etcd's `hasleader` metadata, clientv3's
    /// WithRequireLeader), so a member that has lost its leader ends the stream instead of
    /// going quiet. When a stream ends, the next call starts at the next endpoint.
    func watch(_ request: WatchRequest, onMessage: @escaping @Sendable (WatchStreamMessage) -> Void) throws -> HTTPClient.Task<Void> {
        let index = preferred.withLock { $0 }
        let token = try currentToken().wait()
        var headers = headers(token: token)
        headers.add(name: "Grpc-Metadata-hasleader", value: "true")
        let httpRequest = try HTTPClient.Request(url: endpoints[index] + "/v3/watch", method: .POST, headers: headers,
                                                 body: .bytes(try JSONEncoder().encode(request)), tlsConfiguration: tls)
        let task = http.execute(request: httpRequest, delegate: WatchDelegate(onMessage: onMessage))
        // A watch never ends while its member is well: whatever ended it, try the next.
        task.futureResult.whenComplete { [endpoints] _ in
            self.preferred.withLock { if $0 == index { $0 = (index + 1) % endpoints.count } }
        }
        return task
    }

    /// Forgets `rejected`, a token etcd no longer accepts, so the next call gets another.
    func discardToken(_ rejected: String? = nil) {
        token.withLock { token in
            if rejected == nil || token == rejected { token = nil }
        }
    }

    // MARK: Authentication

    /// The token to send: nil without credentials; the last one; or a new one.
    private func currentToken() -> EventLoopFuture<String?> {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        guard let credentials = options.credentials else { return loop.makeSucceededFuture(nil) }
        if let token = token.withLock({ $0 }) { return loop.makeSucceededFuture(token) }
        let request = AuthenticateRequest(name: credentials.user, password: credentials.password)
        let body: [UInt8]
        do { body = try encode(request) } catch { return loop.makeFailedFuture(error) }
        let first = preferred.withLock { $0 }
        let answer: EventLoopFuture<AuthenticateResponse> =
            attempt("/v3/auth/authenticate", body: body, token: nil, index: first, remaining: endpoints.count, causes: [], sent: readFailure)
        return answer.flatMapThrowing { response in
            guard let value = response.token, !value.isEmpty else { throw EtcdError.badResponse("Auth.Authenticate answered without a token") }
            self.token.withLock { $0 = value }
            return value
        }
    }

    /// What a failure of a request that writes nothing (a read, authentication, compaction)
    /// means once the request may have been sent: the error itself, except for a TLS server
    /// that closed the connection unanswered. TLS 1.3 checks a client's certificate after
    /// the client's side of the handshake, so a server that requires one (etcd's
    /// `--client-cert-auth`) closes the connection instead of answering.
    @Sendable private func readFailure(endpoint: String, error: any Error) -> any Error {
        if tls != nil, options.tls.certificateFile == nil, let closed = error as? HTTPClientError, closed == .remoteConnectionClosed {
            return EtcdError.tls(endpoint: endpoint, reason: "the server closed the connection after the TLS handshake without "
                                    + "answering, as etcd does when it requires a client certificate (--client-cert-auth) and "
                                    + "none was given: set EtcdTLS.certificateFile and keyFile")
        }
        return error
    }

    private func headers(token: String?) -> HTTPHeaders {
        var headers = HTTPHeaders()
        if let token { headers.add(name: "Authorization", value: token) }
        return headers
    }

    func encode(_ value: some Encodable) throws -> [UInt8] { [UInt8](try JSONEncoder().encode(value)) }

    /// Sends `request` to `path`, moving to the next endpoint while connections fail; maps
    /// any other failure with `sent` (given the endpoint and the error).
    private func call<Response: Decodable & Sendable>(_ path: String, _ request: some Encodable,
                                           sent: @escaping @Sendable (String, any Error) -> any Error) -> EventLoopFuture<Response> {
        do { return call(path, body: try encode(request), sent: sent) } catch {
            return MultiThreadedEventLoopGroup.singleton.any().makeFailedFuture(error)
        }
    }

    /// With credentials, a request refused for its token is sent again with a new one, up
    /// to `renewals` times: etcd checks the token before it applies anything, so a refused
    /// request wrote nothing. (A new simple token expires after `--auth-token-ttl` unused,
    /// which a loaded machine can let pass between issuing and sending it.)
    private func call<Response: Decodable & Sendable>(_ path: String, body: [UInt8], renewals: Int = 3,
                                           sent: @escaping @Sendable (String, any Error) -> any Error) -> EventLoopFuture<Response> {
        currentToken().flatMap { token -> EventLoopFuture<Response> in
            let first = self.preferred.withLock { $0 }
            return self.attempt(path, body: body, token: token, index: first, remaining: self.endpoints.count, causes: [], sent: sent)
                .flatMapError { error in
                    guard error is TokenRejected else { return MultiThreadedEventLoopGroup.singleton.any().makeFailedFuture(error) }
                    self.discardToken(token)
                    guard renewals > 0 else {
                        return MultiThreadedEventLoopGroup.singleton.any().makeFailedFuture(
                            EtcdError.authenticationFailed(endpoint: self.endpoints[self.preferred.withLock { $0 }], user: self.options.credentials?.user,
                                                           reason: "etcd refused every token it issued (is --auth-token-ttl shorter than a request takes?)"))
                    }
                    return self.call(path, body: body, renewals: renewals - 1, sent: sent)
                }
        }
    }

    private func attempt<Response: Decodable & Sendable>(_ path: String, body: [UInt8], token: String?, index: Int, remaining: Int, causes: [String],
                                              sent: @escaping @Sendable (String, any Error) -> any Error) -> EventLoopFuture<Response> {
        let endpoint = endpoints[index]
        let deadline = NIODeadline.now() + .nanoseconds(options.requestTimeout.nanoseconds)
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: endpoint + path, method: .POST, headers: headers(token: token), body: .bytes(body), tlsConfiguration: tls)
        } catch {
            return MultiThreadedEventLoopGroup.singleton.any().makeFailedFuture(EtcdError.invalidConfiguration("\(error)"))
        }
        return http.execute(request: request, deadline: deadline).flatMapThrowing { response -> Response in
            guard let buffer = response.body else { throw EtcdError.badResponse("\(path) answered \(response.status) with no body") }
            let data = Data(buffer.readableBytesView)
            guard response.status == .ok else {
                guard let gateway = try? JSONDecoder().decode(GatewayError.self, from: data) else {
                    let text = String(decoding: data.prefix(300), as: UTF8.self)
                    if text.contains("CommonName of client") {
                        throw EtcdError.tls(endpoint: endpoint, reason: "etcd's gateway refuses a client certificate with a Common Name while "
                                                + "authentication is on; issue the client a certificate without one (its Subject Alternative "
                                                + "Names may stay), and authenticate with EtcdOptions.credentials")
                    }
                    throw EtcdError.badResponse("\(path) answered \(response.status): \(text)")
                }
                throw try self.authenticationError(gateway, endpoint: endpoint, path: path) ?? gateway
            }
            do { return try JSONDecoder().decode(Response.self, from: data) } catch {
                throw EtcdError.badResponse("\(path): \(error)")
            }
        }.flatMapError { error in
            let loop = MultiThreadedEventLoopGroup.singleton.any()
            if error is TokenRejected { return loop.makeFailedFuture(error) }
            if let error = error as? EtcdError {
                // An answer that could not be read came after the request was sent: a
                // transaction's may follow its proposal. Every other EtcdError here is a
                // refusal that wrote nothing.
                guard case .badResponse = error else { return loop.makeFailedFuture(error) }
                return loop.makeFailedFuture(sent(endpoint, error))
            }
            // A TLS alert after the handshake may come once a transaction was read (on a
            // connection kept alive): for a transaction only a failed handshake is a refusal.
            let refusedTLS = Self.tlsRefusal(error, handshakeOnly: path.hasSuffix("/txn"))
            guard refusedTLS != nil || Self.isConnectFailure(error) else { return loop.makeFailedFuture(sent(endpoint, error)) }
            let causes = causes + ["\(endpoint): \(refusedTLS ?? "\(error)")"]
            guard remaining > 1 else {
                if let refusedTLS {
                    return loop.makeFailedFuture(EtcdError.tls(endpoint: endpoint, reason: refusedTLS + Self.tlsAdvice))
                }
                return loop.makeFailedFuture(EtcdError.unreachable(endpoints: self.endpoints, cause: causes.joined(separator: "; ")))
            }
            let next = (index + 1) % self.endpoints.count
            self.preferred.withLock { $0 = next }
            return self.attempt(path, body: body, token: token, index: next, remaining: remaining - 1, causes: causes, sent: sent)
        }
    }

    /// What an error refusing the request for authentication or permission means, or nil
    /// for any other: a token to renew (`TokenRejected`), or a typed error.
    private func authenticationError(_ error: GatewayError, endpoint: String, path: String) throws -> EtcdError? {
        let message = error.text
        let user = options.credentials?.user
        if message.contains("invalid auth token") || message.contains("revision of auth store is old") {
            if options.credentials != nil { throw TokenRejected() }
            return .authenticationFailed(endpoint: endpoint, user: nil, reason: message)
        }
        // Without a token etcd names no user: on a server with authentication on, a request
        // without credentials is refused as one with no name, or with no permission.
        if message.contains("user name is empty") || options.credentials == nil && message.contains("permission denied") {
            return .authenticationFailed(endpoint: endpoint, user: nil,
                                         reason: "etcd has authentication enabled and no credentials were given; set EtcdOptions.credentials")
        }
        if message.contains("authentication failed") {
            return .authenticationFailed(endpoint: endpoint, user: user, reason: message + "; check EtcdOptions.credentials")
        }
        if message.contains("authentication is not enabled"), path.hasSuffix("/authenticate") {
            return .authenticationFailed(endpoint: endpoint, user: user,
                                         reason: "etcd does not have authentication enabled; enable it (etcdctl auth enable) or open without credentials")
        }
        if message.contains("permission denied") {
            let operation = path.hasSuffix("/txn") ? "read and write" : path.hasSuffix("/compaction") ? "compact" : "read"
            return .permissionDenied(prefix: prefix, user: user, operation: operation)
        }
        return nil
    }

    private static let tlsAdvice = "; nothing was sent in clear text. Check that EtcdTLS.trustedCAFile holds the CA that signed etcd's "
        + "certificate, that the certificate is valid today and names the endpoint's host, and that EtcdTLS.certificateFile and keyFile "
        + "are given when etcd runs with --client-cert-auth."

    /// What went wrong when `error` is TLS refusing the connection: the handshake failed
    /// (on either side), or the server answered the request with an alert instead of
    /// reading it (TLS 1.3 checks a client's certificate after the client's handshake ends).
    /// Either way the server never read the request.
    static func tlsRefusal(_ error: any Error, handshakeOnly: Bool) -> String? {
        switch error {
        case let error as NIOSSLError:
            if case let .handshakeFailed(inner) = error { return "the TLS handshake failed: \(inner)" }
            return nil
        case let error as BoringSSLError:
            guard !handshakeOnly, case let .sslError(stack) = error else { return nil }
            let text = "\(stack)"
            guard text.contains("ALERT") || text.contains("CERTIFICATE") else { return nil }
            return "the server refused the connection with a TLS alert: \(text)"
        case let error as NIOSSLExtraError:
            // The host name is checked in the handshake; another of these errors (no
            // progress, say) may come once a request was written.
            guard !handshakeOnly || error == .failedToValidateHostname || error == .serverHostnameImpossibleToMatch else { return nil }
            return "the server's certificate does not match: \(error)"
        default:
            return nil
        }
    }

    /// Whether `error` says no connection was made, so the request was never sent.
    static func isConnectFailure(_ error: any Error) -> Bool {
        if error is NIOConnectionError { return true }
        if let error = error as? HTTPClientError,
           [.connectTimeout, .getConnectionFromPoolTimeout].contains(error) { return true }
        if let error = error as? ChannelError, case .connectTimeout = error { return true }
        if let error = error as? IOError, [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH].contains(error.errnoCode) { return true }
        return false
    }

    /// What a gateway error means for a transaction sent to `endpoint` (nil: for a
    /// request that writes nothing). Only the refusals in `refusalsThatWriteNothing` say
    /// nothing was written; any other answer may come after the proposal was applied. A
    /// member stopped gracefully, for one, closes its gateway's connection to its gRPC
    /// server after applying what it had in flight, and the gateway answers those
    /// transactions "transport is closing" (code 14).
    static func classify(_ error: GatewayError, outcomeUnknownAt endpoint: String?) -> EtcdError {
        let message = error.text
        if message.contains("too many operations in txn request") {
            return .server(code: error.code ?? 0, message: message + " (the server's --max-txn-ops is lower than EtcdOptions.maxTxnOps)")
        }
        if message.contains("request is too large") {
            return .server(code: error.code ?? 0, message: message + " (the server's --max-request-bytes is lower than EtcdOptions.maxRequestBytes)")
        }
        if let endpoint, !refusalsThatWriteNothing.contains(where: { message.contains($0) }) {
            return .commitOutcomeUnknown(endpoint: endpoint, cause: message)
        }
        return .server(code: error.code ?? 0, message: message)
    }

    /// etcd's refusals of a transaction that write nothing on any member: checks made
    /// before the request is proposed (its shape, its size, the server's load, the token)
    /// and the permission checks every member makes alike before applying it. Not "database
    /// space exceeded": etcd also answers that for a transaction it applied just as the
    /// quota ran out.
    static let refusalsThatWriteNothing = [
        "too many operations in txn request", "duplicate key given in txn request", "key is not provided",
        "request is too large", "too many requests",
        "permission denied", "user name is empty", "invalid auth token", "revision of auth store is old",
        "authentication failed",
    ]
}

/// etcd refused a request's token; the client gets a new one and sends the request again.
private struct TokenRejected: Error {}

/// Splits the watch stream's body into its newline-delimited JSON messages.
private final class WatchDelegate: HTTPClientResponseDelegate, Sendable {
    typealias Response = Void

    private let onMessage: @Sendable (WatchStreamMessage) -> Void
    private let pending = Mutex<[UInt8]>([])

    init(onMessage: @escaping @Sendable (WatchStreamMessage) -> Void) { self.onMessage = onMessage }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        let lines: [[UInt8]] = pending.withLock { pending in
            pending.append(contentsOf: buffer.readableBytesView)
            var lines: [[UInt8]] = []
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(Array(pending[..<newline]))
                pending.removeSubrange(...newline)
            }
            return lines
        }
        for line in lines where !line.isEmpty {
            do { onMessage(try JSONDecoder().decode(WatchStreamMessage.self, from: Data(line))) } catch {
                onMessage(WatchStreamMessage(result: nil, error: GatewayError(error: "undecodable watch message: \(error)")))
            }
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {}
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
