// A real etcd for the tests: `etcd` from the system (Debian: etcd-server, installed by
// scripts/bootstrap), on 127.0.0.1 with free ports and a temporary data directory. A shell
// wrapper stops it when the test process goes away, even when it crashes; `stop()` stops
// it at once. Most tests share one server (`shared`) and keep apart by key prefix.
import Foundation
import Strata
import StrataEtcd
import Testing

final class EtcdServer: Sendable {
    let endpoint: String
    let directory: String
    let pid: Int32

    /// Limits the tests' server runs with, told to the stores the same way.
    static let maxTxnOps = 1024

    static var options: EtcdOptions {
        var options = EtcdOptions()
        options.maxTxnOps = maxTxnOps
        return options
    }

    /// The server most tests share, started on first use.
    static let shared: Result<EtcdServer, any Error> = Result { try EtcdServer() }

    /// A store over the shared server, under a prefix of its own.
    static func makeStore(prefix: String = "test-\(UUID().uuidString)/") async throws -> Store {
        try await Store.open(etcd: [shared.get().endpoint], prefix: prefix, options: options)
    }

    init() throws {
        guard let etcd = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw ServerError("etcd is not installed: run scripts/bootstrap (Debian's etcd-server)")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-etcd-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let client = try Self.freePort(), peer = try Self.freePort()
        endpoint = "http://127.0.0.1:\(client)"
        let arguments = [
            etcd, "--name", "strata-test", "--data-dir", directory + "/data",
            "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
            "--listen-peer-urls", "http://127.0.0.1:\(peer)", "--initial-advertise-peer-urls", "http://127.0.0.1:\(peer)",
            "--initial-cluster", "strata-test=http://127.0.0.1:\(peer)", "--max-txn-ops", "\(Self.maxTxnOps)",
        ].map { "'\($0)'" }.joined(separator: " ")
        // The wrapper records etcd's pid, then stops it once its parent (this process) is gone.
        let script = """
            \(arguments) > '\(directory)/etcd.log' 2>&1 & echo $! > '\(directory)/pid'
            while kill -0 \(getpid()) 2>/dev/null && kill -0 $! 2>/dev/null; do sleep 1; done
            kill $! 2>/dev/null; rm -rf '\(directory)'
            """
        let wrapper = Process()
        wrapper.executableURL = URL(fileURLWithPath: "/bin/sh")
        wrapper.arguments = ["-c", script]
        // Not the test process's own output: `swift test` waits for every holder of its pipe.
        wrapper.standardInput = FileHandle.nullDevice
        wrapper.standardOutput = FileHandle.nullDevice
        wrapper.standardError = FileHandle.nullDevice
        try wrapper.run()
        var pid: Int32 = 0
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if pid == 0, let text = try? String(contentsOfFile: directory + "/pid", encoding: .utf8),
               let value = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                pid = value
            }
            if pid != 0, Self.accepts(port: client) { break }
            usleep(50_000)
        }
        guard pid != 0, Self.accepts(port: client) else {
            let log = (try? String(contentsOfFile: directory + "/etcd.log", encoding: .utf8)) ?? ""
            throw ServerError("etcd did not start within 20 s: \(log.suffix(2_000))")
        }
        self.pid = pid
    }

    /// Stops the server (the wrapper then removes its directory).
    func stop() {
        kill(pid, SIGKILL)
    }

    /// Freezes or thaws the server's process, as a hung machine would.
    func pause() { kill(pid, SIGSTOP) }
    func resume() { kill(pid, SIGCONT) }

    struct ServerError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    private static func freePort() throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(socket, address, length) == 0 && getsockname(socket, address, &length) == 0
            }
        }
        guard bound else { throw ServerError("no free port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    private static func accepts(port: UInt16) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}
