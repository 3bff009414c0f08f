// The backends the shared suites run on (`Backend`: one suite, two backends), and the etcd
// they share (`EtcdServer.shared`, StrataTesting's EtcdProcess started on first use); the
// tests keep apart by key prefix.
import Foundation
import Strata
import StrataEtcd
import StrataTesting

/// Where a shared test runs: the embedded engine (in memory) or etcd. Tests take it as an
/// argument, `@Test(arguments: Backend.allCases)`, and open their store with `makeStore()`.
public enum Backend: String, CaseIterable, Sendable {
    case embedded, etcd

    /// A new, empty store on this backend (over etcd: under a prefix of its own).
    public func makeStore() async throws -> Store {
        switch self {
        case .embedded: try Store.inMemory()
        case .etcd: try await EtcdServer.makeStore()
        }
    }

    /// Runs `body` with a new, empty store on this backend, and closes the store after it.
    /// The body is synchronous, as the blocking API (`store.write { }`) is.
    @discardableResult
    public func withStore<T>(_ body: (Store) throws -> T) async throws -> T {
        let store = try await makeStore()
        defer { try? store.close() }
        return try body(store)
    }
}

/// The tests' etcd: one shared server, or one of a test's own (`start()`) when the test
/// stops or freezes it.
public enum EtcdServer {
    /// The limit the tests' servers run with, told to the stores the same way.
    public static let maxTxnOps = 1024

    public static var options: EtcdOptions {
        var options = EtcdOptions()
        options.maxTxnOps = maxTxnOps
        return options
    }

    /// The server most tests share, started on first use.
    public static let shared: Result<EtcdProcess, any Error> = Result { try start() }

    /// A server of the caller's own.
    public static func start() throws -> EtcdProcess { try EtcdProcess(maxTxnOps: maxTxnOps) }

    /// A store over the shared server, under a prefix of its own.
    public static func makeStore(prefix: String = "test-\(UUID().uuidString)/") async throws -> Store {
        try await Store.open(etcd: [shared.get().endpoint], prefix: prefix, options: options)
    }
}
