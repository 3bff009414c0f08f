// A small etcd v3 client: KV.Range, KV.Txn and Watch.Watch, over etcd's JSON gateway
// (HTTP/1.1, `POST /v3/kv/range`, `/v3/kv/txn`, `/v3/watch`) with AsyncHTTPClient.
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
// never resent: its outcome is unknown (EtcdError.commitOutcomeUnknown).
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

final class EtcdClient: Sendable {
    let endpoints: [String]
    let options: EtcdOptions
    private let http: HTTPClient
    private let preferred = Mutex(0)

    init(endpoints: [String], options: EtcdOptions) throws(EtcdError) {
        guard !endpoints.isEmpty else { throw .invalidConfiguration("no endpoint was given; pass etcd's client URL, such as http://127.0.0.1:2379") }
        for endpoint in endpoints {
            guard let url = URL(string: endpoint), url.scheme == "http", url.host != nil else {
                throw .invalidConfiguration("endpoint \"\(endpoint)\" is not an http:// URL of etcd's client port (TLS is not supported yet)")
            }
        }
        self.endpoints = endpoints.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.options = options
        http = Self.sharedHTTP
    }

    /// One client for every store of the process, never shut down (so a dropped store
    /// needs no close): no read timeout, since a watch may be quiet for hours and every
    /// other call has its own deadline; a connection that cannot be made fails at once
    /// instead of being retried until the deadline, so the next endpoint is tried. Each
    /// store's watch holds a connection for as long as the store is open, so the pool's
    /// limit per host is high enough not to make calls queue behind them.
    private static let sharedHTTP: HTTPClient = {
        var configuration = HTTPClient.Configuration(timeout: HTTPClient.Configuration.Timeout(connect: .seconds(5), read: nil))
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 1_024
        return HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
    }()

    // MARK: Calls

    /// KV.Range. Reads are idempotent: any failure moves on to the next endpoint.
    func range(_ request: RangeRequest) -> EventLoopFuture<RangeResponse> {
        call("/v3/kv/range", request, sent: { _, error in error })
    }

    /// KV.Txn. Once the request may have reached a server, failures are `commitOutcomeUnknown`.
    func txn(_ body: [UInt8]) -> EventLoopFuture<TxnResponse> {
        call("/v3/kv/txn", body: body) { endpoint, error in
            if let gateway = error as? GatewayError { return Self.classify(gateway, outcomeUnknownAt: endpoint) }
            return EtcdError.commitOutcomeUnknown(endpoint: endpoint, cause: "\(error)")
        }
    }

    /// Watch.Watch from `request`: calls `onMessage` with each message, in order, on an
    /// event loop. The returned future ends with the stream (closed by etcd, an error, or
    /// `cancel` of the task).
    func watch(_ request: WatchRequest, onMessage: @escaping @Sendable (WatchStreamMessage) -> Void) throws -> HTTPClient.Task<Void> {
        let endpoint = endpoints[preferred.withLock { $0 }]
        var httpRequest = try HTTPClient.Request(url: endpoint + "/v3/watch", method: .POST)
        httpRequest.body = .bytes(try JSONEncoder().encode(request))
        return http.execute(request: httpRequest, delegate: WatchDelegate(onMessage: onMessage))
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

    private func call<Response: Decodable & Sendable>(_ path: String, body: [UInt8],
                                           sent: @escaping @Sendable (String, any Error) -> any Error) -> EventLoopFuture<Response> {
        let first = preferred.withLock { $0 }
        return attempt(path, body: body, index: first, remaining: endpoints.count, causes: [], sent: sent)
    }

    private func attempt<Response: Decodable & Sendable>(_ path: String, body: [UInt8], index: Int, remaining: Int, causes: [String],
                                              sent: @escaping @Sendable (String, any Error) -> any Error) -> EventLoopFuture<Response> {
        let endpoint = endpoints[index]
        let deadline = NIODeadline.now() + .nanoseconds(options.requestTimeout.nanoseconds)
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: endpoint + path, method: .POST, body: .bytes(body))
        } catch {
            return MultiThreadedEventLoopGroup.singleton.any().makeFailedFuture(EtcdError.invalidConfiguration("\(error)"))
        }
        return http.execute(request: request, deadline: deadline).flatMapThrowing { response -> Response in
            guard let buffer = response.body else { throw EtcdError.badResponse("\(path) answered \(response.status) with no body") }
            let data = Data(buffer.readableBytesView)
            guard response.status == .ok else {
                throw (try? JSONDecoder().decode(GatewayError.self, from: data))
                    ?? EtcdError.badResponse("\(path) answered \(response.status)")
            }
            do { return try JSONDecoder().decode(Response.self, from: data) } catch {
                throw EtcdError.badResponse("\(path): \(error)")
            }
        }.flatMapError { error in
            let loop = MultiThreadedEventLoopGroup.singleton.any()
            if error is EtcdError { return loop.makeFailedFuture(error) }
            guard Self.isConnectFailure(error) else { return loop.makeFailedFuture(sent(endpoint, error)) }
            let causes = causes + ["\(endpoint): \(error)"]
            guard remaining > 1 else {
                return loop.makeFailedFuture(EtcdError.unreachable(endpoints: self.endpoints, cause: causes.joined(separator: "; ")))
            }
            let next = (index + 1) % self.endpoints.count
            self.preferred.withLock { $0 = next }
            return self.attempt(path, body: body, index: next, remaining: remaining - 1, causes: causes, sent: sent)
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

    /// What a gateway error means for a transaction sent to `endpoint`.
    static func classify(_ error: GatewayError, outcomeUnknownAt endpoint: String?) -> EtcdError {
        let message = error.text
        if message.contains("too many operations in txn request") {
            return .server(code: error.code ?? 0, message: message + " (the server's --max-txn-ops is lower than EtcdOptions.maxTxnOps)")
        }
        if message.contains("request is too large") {
            return .server(code: error.code ?? 0, message: message + " (the server's --max-request-bytes is lower than EtcdOptions.maxRequestBytes)")
        }
        // Timeouts and leader changes leave a proposal that may still be applied.
        if let endpoint, message.contains("timed out") || message.contains("leader changed") || message.contains("no leader") {
            return .commitOutcomeUnknown(endpoint: endpoint, cause: message)
        }
        return .server(code: error.code ?? 0, message: message)
    }
}

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
