// Helpers shared by the contexts' tests: byte keys from text, and stores on a simulated
// file system whose operations can be counted and failed.
import Strata
import StrataTesting
import Synchronization

/// The bytes of `text`.
func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// The text of `value` (for readable expectations).
func text(_ value: [UInt8]?) -> String? { value.map { String(decoding: $0, as: UTF8.self) } }

/// The keys of scan results as text.
func keys(_ pairs: [(key: [UInt8], value: [UInt8])]) -> [String] { pairs.map { String(decoding: $0.key, as: UTF8.self) } }

/// A store on a fresh simulated file system, and that file system.
func simulatedStore(options: EngineOptions = EngineOptions()) throws -> (Store, SimulatedFileSystem) {
    let fileSystem = SimulatedFileSystem()
    return (try Store.open(path: "/db", fileSystem: fileSystem, options: options), fileSystem)
}

/// Commits `pairs` as one unit of work.
func seed(_ store: Store, _ pairs: [String: String]) throws {
    try store.write { unit in
        for (key, value) in pairs { try unit.put(bytes(key), bytes(value)) }
    }
}

/// A value shared between threads, as an application would share one: behind a `Mutex`.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) { mutex = Mutex(value) }

    func withLock<T: Sendable>(_ body: (inout sending Value) -> T) -> T { mutex.withLock { body(&$0) } }
}
