import Foundation
import StrataWAL
@testable import StrataEngine

/// What the tests of background checkpoints (QuietCheckpointTests, IdleCheckpointTests)
/// share: their keys, their writes, and a wait for a checkpoint on its own thread.
enum BackgroundCheckpoints {
    static func key(_ number: Int) -> [UInt8] { Array(String(format: "k%05d", number).utf8) }

    /// Commits keys `range`, each with a 100-byte value.
    static func write(_ range: Range<Int>, to engine: StorageEngine) throws {
        var batch = WALBatch()
        for number in range { batch.put(key(number), [UInt8](repeating: UInt8(truncatingIfNeeded: number), count: 100)) }
        try engine.commit(batch)
    }

    /// The store's status once no background checkpoint runs (waiting at most 30 s).
    static func settled(_ engine: StorageEngine) throws -> StoreStatus {
        let deadline = ContinuousClock.now + .seconds(30)
        while engine.checkpointRunning.load(ordering: .acquiring), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.001) }
        return try engine.status()
    }
}
