// TCPRelay: a lost network between a store and etcd, for tests. It relays connections
// from a port of its own to etcd's, one thread per direction, until `cut()`.
import Foundation
import Synchronization

/// A failure of the test network helpers, with what went wrong.
public struct NetworkError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Relays TCP connections from a port of its own on 127.0.0.1 to a port there: point a
/// store at `http://127.0.0.1:<port>` to lose its network on `cut()` (every relayed
/// connection ends, new ones are refused) and get it back on `restore()`. `close()` stops
/// it (its threads run until then).
///
///     let relay = try TCPRelay(to: etcdPort)
///     let store = try await Store.open(etcd: ["http://127.0.0.1:\(relay.port)"], prefix: "p/")
public final class TCPRelay: Sendable {
    /// The port this relay listens on.
    public let port: UInt16
    private let target: UInt16
    private let state = Mutex(State())

    private struct State {
        var refusing = false
        var closed = false
        /// The listening socket; -1 while cut. Only the accept loop closes it, after `cut`
        /// shut it down, so its number cannot be reused while the loop may still accept on it.
        var listener: Int32 = -1
        /// Open relayed sockets, and how many of each pair's two pumps still run.
        var sockets: Set<Int32> = []
        var running: [Int32: Int] = [:]
        /// What clients sent, when recording (the first `recordLimit` bytes).
        var recorded: [UInt8] = []
    }

    private let recording: Bool
    private static let recordLimit = 16 << 20

    /// Starts relaying to `target` on 127.0.0.1; with `recording`, keeps what clients send
    /// (the first 16 MiB, every connection's bytes in arrival order) for `recorded()`.
    public init(to target: UInt16, recording: Bool = false) throws {
        self.target = target
        self.recording = recording
        let listener = try Self.listen(port: 0)
        port = Self.port(of: listener)
        state.withLock { $0.listener = listener }
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// A socket listening on 127.0.0.1:`port` (0: any free port), with SO_REUSEADDR so a
    /// relay can listen on its port again after `cut()`.
    private static func listen(port: UInt16) throws -> Int32 {
        let listener = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = loopbackAddress(port: port)
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard bound, Glibc.listen(listener, 64) == 0 else {
            let error = errno
            Glibc.close(listener)
            throw NetworkError("the relay could not listen on port \(port): errno \(error)")
        }
        return listener
    }

    private static func port(of socket: Int32) -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }

    /// Ends every relayed connection and stops listening, so new connections are refused
    /// (ECONNREFUSED, as from a host whose server is down), until `restore()`. (Sockets are
    /// shut down here and closed by their pumps, under the lock, so no number is reused
    /// while still listed.)
    public func cut() {
        state.withLock { state in
            state.refusing = true
            for socket in state.sockets { shutdown(socket, Int32(SHUT_RDWR)) }
            // A shut-down listening socket refuses connections; the accept loop closes it.
            if state.listener >= 0 { shutdown(state.listener, Int32(SHUT_RDWR)) }
        }
    }

    /// The bytes clients sent through this relay so far (empty unless recording).
    public func recorded() -> [UInt8] { state.withLock { $0.recorded } }

    /// Listens on its port again and relays new connections. Throws when the port cannot
    /// be listened on within 10 seconds (another socket took it meanwhile).
    public func restore() throws {
        for _ in 0..<1_000 {
            let listening: Bool = state.withLock { state in
                guard !state.closed else { return true }
                // The accept loop has not closed the old listener yet.
                guard state.listener < 0 || !state.refusing else { return false }
                if state.listener < 0 {
                    guard let listener = try? Self.listen(port: port) else { return false }
                    state.listener = listener
                }
                state.refusing = false
                return true
            }
            if listening { return }
            usleep(10_000)
        }
        throw NetworkError("the relay could not listen on port \(port) again within 10 s")
    }

    /// Ends every connection and stops listening.
    public func close() {
        cut()
        state.withLock { $0.closed = true }
    }

    /// A connected TCP socket to 127.0.0.1:`port` (the caller closes it).
    public static func connect(port: UInt16) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = loopbackAddress(port: port)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            Glibc.close(socket)
            throw NetworkError("could not connect to 127.0.0.1:\(port): errno \(errno)")
        }
        return socket
    }

    private func acceptLoop() {
        while true {
            let (listener, closed) = state.withLock { ($0.listener, $0.closed) }
            if closed && listener < 0 { return }
            guard listener >= 0 else {
                usleep(10_000)
                continue
            }
            let client = accept(listener, nil, nil)
            if client < 0 {
                // Cut (or closed): this loop owns the shut-down listener, and closes it.
                state.withLock { state in
                    if state.refusing || state.closed, state.listener == listener {
                        Glibc.close(listener)
                        state.listener = -1
                    }
                }
                continue
            }
            guard let upstream = try? Self.connect(port: target) else {
                Glibc.close(client)
                continue
            }
            // Registered under the lock that `cut` takes, so none escapes a cut.
            let relayed = state.withLock { state in
                guard !state.refusing, !state.closed else { return false }
                state.sockets.formUnion([client, upstream])
                state.running[client] = 2
                return true
            }
            guard relayed else {
                Glibc.close(client)
                Glibc.close(upstream)
                continue
            }
            Thread.detachNewThread { [self] in pump(from: client, to: upstream, pair: client, record: recording) }
            Thread.detachNewThread { [self] in pump(from: upstream, to: client, pair: client) }
        }
    }

    /// Copies bytes one way until either side ends, then ends both; the pair's second pump
    /// to stop closes the two sockets.
    private func pump(from source: Int32, to destination: Int32, pair: Int32, record: Bool = false) {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        copying: while true {
            let count = recv(source, &buffer, buffer.count, 0)
            if count <= 0 { break }
            if record {
                state.withLock { state in
                    let room = Self.recordLimit - state.recorded.count
                    if room > 0 { state.recorded += buffer[0..<min(count, room)] }
                }
            }
            var sent = 0
            while sent < count {
                let written = buffer.withUnsafeBytes { send(destination, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
                if written <= 0 { break copying }
                sent += written
            }
        }
        state.withLock { state in
            shutdown(source, Int32(SHUT_RDWR))
            shutdown(destination, Int32(SHUT_RDWR))
            state.running[pair, default: 1] -= 1
            guard state.running[pair] == 0 else { return }
            state.running[pair] = nil
            state.sockets.subtract([source, destination])
            Glibc.close(source)
            Glibc.close(destination)
        }
    }
}
