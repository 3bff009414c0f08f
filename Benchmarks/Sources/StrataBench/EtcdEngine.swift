// etcd: a Strata store over etcd (StrataEtcd), against an etcd member this run starts under
// its data directory (StrataTesting's EtcdProcess), so its log is synced on the same disk as
// the other engines'. Writes go through units of work, the only way into a store over etcd:
// each is one etcd transaction that compares every written key's mod_revision and returns
// once the local replica shows it. Reads are the replica's (in memory, kept current by
// etcd's Watch), so readrandom measures no network round trip.
//
// etcd-cluster: the same store over three members on this machine (StrataTesting's
// EtcdCluster), with TLS on the client and peer ports, client certificates required and
// authentication on (a user whose role grants readwrite on the store's prefix): every
// commit is a TLS request carrying a token, and a Raft commit on two of three members.
import Foundation
import Strata
import StrataEtcd
import StrataTesting
import Synchronization

final class EtcdBench: BenchEngine {
    private let server: EtcdProcess?
    private let cluster: EtcdCluster?
    private let store: Store
    private let readContext = Mutex<Context?>(nil)

    /// Starts etcd (one member, or a TLS cluster with authentication) with room for
    /// `batch` keys per transaction (`--max-txn-ops`) and opens a store on it.
    init(directory: String, batch: Int, cluster clustered: Bool) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var options = EtcdOptions()
        options.maxTxnOps = max(batch, 128)
        let endpoints: [String]
        if clustered {
            var configuration = EtcdCluster.Configuration(members: 3, tls: true, clientCertificates: true,
                                                          rootPassword: "root-\(UUID().uuidString)")
            configuration.maxTxnOps = options.maxTxnOps
            configuration.parentDirectory = directory
            let cluster = try EtcdCluster(configuration)
            let password = "bench-\(UUID().uuidString)"
            try cluster.addUser("bench", password: password, readWritePrefix: "bench/")
            let certificates = cluster.certificates!
            options.tls = EtcdTLS(trustedCAFile: certificates.caFile, certificateFile: certificates.clientCertificateFile,
                                  keyFile: certificates.clientKeyFile)
            options.credentials = EtcdCredentials(user: "bench", password: password)
            endpoints = cluster.directEndpoints
            self.cluster = cluster
            server = nil
        } else {
            let server = try EtcdProcess(maxTxnOps: options.maxTxnOps, parentDirectory: directory)
            endpoints = [server.endpoint]
            self.server = server
            cluster = nil
        }
        let opened = Mutex<Swift.Result<Store, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        // The open is async; this thread is the benchmark's own, not one of the pool's.
        Task {
            let result: Swift.Result<Store, any Error>
            do { result = .success(try await Store.open(etcd: endpoints, prefix: "bench/", options: options)) } catch {
                result = .failure(error)
            }
            opened.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        do { store = try opened.withLock { $0! }.get() } catch {
            server?.stop()
            cluster?.shutdown()
            throw error
        }
    }

    deinit {
        server?.stop()
        cluster?.shutdown()
    }

    func write(_ keys: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        try store.write { unit in
            for key in keys {
                if let value = values(key) { try unit.put(Workload.key(key), value) } else { try unit.delete(Workload.key(key)) }
            }
        }
    }

    func nested(kept: ArraySlice<Int>, discarded: ArraySlice<Int>, values: (Int) -> [UInt8]?) throws {
        throw BenchError(description: "etcd runs fillsync, fillsync-concurrent, fillrandom and readrandom only")
    }

    func beginReads() throws { readContext.withLock { $0 = store.makeContext() } }
    func endReads() { readContext.withLock { $0 = nil } }

    func read(_ key: Int) throws -> Bool {
        try readContext.withLock { context in
            let context = context ?? store.makeContext()
            return try context.get(Workload.key(key)) != nil
        }
    }

    func scanCount() throws -> Int {
        try store.read { try $0.scan().count }
    }

    var fdatasyncs: Int? { nil }

    /// Closes the store; etcd keeps running (its files are measured) until the engine goes away.
    func makeReader() throws -> any BenchReader { throw BenchError(description: "etcd runs no readwhilewriting") }

    func close() throws { try store.close() }
}
