// A throwaway etcd for tests and benchmarks of code that runs on StrataEtcd: `etcd` from the
// system (Debian: etcd-server, installed by scripts/bootstrap), one member on 127.0.0.1 with
// free ports and a data directory of its own. A shell wrapper stops it and removes its
// directory when the process that started it goes away, even when that process crashes;
// `stop()` kills it at once.
import Foundation

/// One etcd member started for a test or a benchmark run.
///
///     let etcd = try EtcdProcess()
///     let store = try await Store.open(etcd: [etcd.endpoint], prefix: "test/")
public final class EtcdProcess: Sendable {
    /// The client URL, `http://127.0.0.1:<port>`.
    public let endpoint: String
    /// The member's directory (its data directory and log, `etcd.log`, are inside).
    public let directory: String
    public let pid: Int32

    /// Starts etcd and returns once it accepts connections.
    /// - Parameters:
    ///   - maxTxnOps: the server's `--max-txn-ops` (etcd's default is 128); tell the stores
    ///     the same through `EtcdOptions.maxTxnOps`.
    ///   - parentDirectory: where the member's directory is made; the disk under it is the
    ///     disk etcd's log is synced on.
    public init(maxTxnOps: Int = 128, parentDirectory: String = NSTemporaryDirectory()) throws {
        guard let etcd = ["/usr/bin/etcd", "/usr/local/bin/etcd"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw StartError("etcd is not installed: run scripts/bootstrap (Debian's etcd-server)")
        }
        directory = (parentDirectory as NSString).appendingPathComponent("strata-etcd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let client = try Self.freePort(), peer = try Self.freePort()
        endpoint = "http://127.0.0.1:\(client)"
        let arguments = [
            etcd, "--name", "strata", "--data-dir", directory + "/data",
            "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
            "--listen-peer-urls", "http://127.0.0.1:\(peer)", "--initial-advertise-peer-urls", "http://127.0.0.1:\(peer)",
            "--initial-cluster", "strata=http://127.0.0.1:\(peer)", "--max-txn-ops", "\(maxTxnOps)",
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
        // Not this process's own output: `swift test` waits for every holder of its pipe.
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
            if pid != 0 { kill(pid, SIGKILL) }
            throw StartError("etcd did not start within 20 s: \(log.suffix(2_000))")
        }
        self.pid = pid
    }

    /// Stops the server (the wrapper then removes its directory).
    public func stop() {
        kill(pid, SIGKILL)
    }

    /// Freezes or thaws the server's process, as a hung machine would.
    public func pause() { kill(pid, SIGSTOP) }
    public func resume() { kill(pid, SIGCONT) }

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    private static func freePort() throws -> UInt16 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(socket, address, length) == 0 && getsockname(socket, address, &length) == 0
            }
        }
        guard bound else { throw StartError("no free port: errno \(errno)") }
        return UInt16(bigEndian: address.sin_port)
    }

    private static func accepts(port: UInt16) -> Bool {
        guard let socket = try? TCPRelay.connect(port: port) else { return false }
        close(socket)
        return true
    }
}

/// The IPv4 address 127.0.0.1:`port`.
func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = port.bigEndian
    return address
}
