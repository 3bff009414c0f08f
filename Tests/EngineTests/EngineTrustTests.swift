import StrataFileIO
import StrataWAL
import Testing
@testable import StrataEngine
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@Suite struct EngineTrustTests {
    /// A store whose creation fails at any operation on a full disk (ENOSPC from there on)
    /// opens once there is room again, whether the process ended or the power went: it is
    /// never left half-made and unopenable.
    @Test func aStoreHalfCreatedOnAFullDiskOpensOnceThereIsRoom() throws {
        let dry = SimulatedFileSystem()
        let start = dry.operationCount
        let (engine, _) = try StorageEngine.open(path: "/s", fileSystem: dry)
        try engine.commit(WALBatch([.put(key: [1], value: [1])]))
        let operations = dry.operationCount - start
        try engine.close()
        var failed = 0
        for operation in 0..<operations {
            for powerLoss in [false, true] {
                let fileSystem = SimulatedFileSystem()
                fileSystem.injectFault(errno: ENOSPC, atOperation: operation, persistent: true)
                do {
                    let (engine, _) = try StorageEngine.open(path: "/s", fileSystem: fileSystem)
                    _ = try? engine.commit(WALBatch([.put(key: [1], value: [1])]))
                    try? engine.close()
                } catch {
                    failed += 1
                }
                fileSystem.crash(powerLoss ? .random(seed: UInt64(operation)) : .keepAll)
                let (again, _) = try StorageEngine.open(path: "/s", fileSystem: fileSystem)
                try again.commit(WALBatch([.put(key: [2], value: [2])]))
                try again.close()
                let (reopened, _) = try StorageEngine.open(path: "/s", fileSystem: fileSystem)
                #expect(try reopened.snapshot().get([2]) == [2], "ENOSPC from operation \(operation)")
                #expect(reopened.verify().isValid)
                try reopened.close()
            }
        }
        print("ENOSPC from each of \(operations) operations of creating a store and its first commit: "
              + "\(failed) opens failed, every store opened once there was room")
        #expect(failed > 0)
    }
}
