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
    private let listener: Int32
    private let state = Mutex(State())

    private struct State {
        var refusing = false
        var closed = false
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
        let listener = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(listener, address, length) == 0 && getsockname(listener, address, &length) == 0
            }
        }
        guard bound, listen(listener, 16) == 0 else {
            Glibc.close(listener)
            throw NetworkError("the relay could not listen: errno \(errno)")
        }
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Ends every relayed connection and refuses new ones. (Sockets are shut down here and
    /// closed by their pumps, under the lock, so no number is reused while still listed.)
    public func cut() {
        state.withLock { state in
            state.refusing = true
            for socket in state.sockets { shutdown(socket, Int32(SHUT_RDWR)) }
        }
    }

    /// The bytes clients sent through this relay so far (empty unless recording).
    public func recorded() -> [UInt8] { state.withLock { $0.recorded } }

    /// Relays new connections again.
    public func restore() { state.withLock { $0.refusing = false } }

    /// Ends every connection and stops listening.
    public func close() {
        cut()
        state.withLock { $0.closed = true }
        shutdown(listener, Int32(SHUT_RDWR))
        Glibc.close(listener)
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
            let client = accept(listener, nil, nil)
            if client < 0 {
                if state.withLock({ $0.closed }) { return }
                continue
            }
            guard !state.withLock({ $0.refusing }), let upstream = try? Self.connect(port: target) else {
                Glibc.close(client)
                continue
            }
            state.withLock { state in
                state.sockets.formUnion([client, upstream])
                state.running[client] = 2
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
