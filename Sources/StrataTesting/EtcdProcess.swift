// A throwaway etcd for tests and benchmarks of code that runs on StrataEtcd: one member on
// 127.0.0.1 with free ports and a data directory of its own, removed when the member exits
// (EtcdMember.swift: how it is run, and made sure to end). `stop()` kills it at once. For
// several members, TLS and authentication: EtcdCluster.
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
    public var pid: Int32 { member.pid }
    private let member: EtcdMember

    /// Starts etcd and returns once it accepts connections.
    /// - Parameters:
    ///   - maxTxnOps: the server's `--max-txn-ops` (etcd's default is 128); tell the stores
    ///     the same through `EtcdOptions.maxTxnOps`.
    ///   - parentDirectory: where the member's directory is made; the disk under it is the
    ///     disk etcd's log is synced on.
    public init(maxTxnOps: Int = 128, parentDirectory: String = NSTemporaryDirectory()) throws {
        let etcd = try EtcdMember.executable()
        directory = (parentDirectory as NSString).appendingPathComponent("strata-etcd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let client = try EtcdMember.freePort(), peer = try EtcdMember.freePort()
        endpoint = "http://127.0.0.1:\(client)"
        let arguments = [
            etcd, "--name", "strata", "--data-dir", directory + "/data",
            "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
            "--listen-peer-urls", "http://127.0.0.1:\(peer)", "--initial-advertise-peer-urls", "http://127.0.0.1:\(peer)",
            "--initial-cluster", "strata=http://127.0.0.1:\(peer)", "--max-txn-ops", "\(maxTxnOps)",
        ]
        member = try EtcdMember(arguments: arguments, log: directory + "/etcd.log", port: client, removing: directory)
    }

    /// Stops the server and waits until it has exited (and its directory is removed).
    public func stop() {
        member.kill()
    }

    /// Freezes or thaws the server's process, as a hung machine would.
    public func pause() { member.pause() }
    public func resume() { member.resume() }

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
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
