import StrataFileIO
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

@Suite struct SimulatedFileSystemTests {
    /// A file in the directory /db, whose own name in / is durable.
    private func makeFile(_ fileSystem: SimulatedFileSystem, _ path: String = "/db/a") throws -> any OpenFile {
        try fileSystem.createDirectoryDurably("/db")
        return try fileSystem.open(path, options: [.create, .write])
    }

    @Test func syncedDataSurvivesEveryCrashAndUnsyncedDataMayNot() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        try file.write([1, 2, 3, 4], at: 0)
        try file.syncData()
        try fileSystem.syncDirectory("/db")
        try file.write([9, 9], at: 1)
        fileSystem.crash(.dropAll)
        #expect(fileSystem.contents(of: "/db/a") == [1, 2, 3, 4])
    }

    @Test func aProcessKillKeepsEverythingTheKernelHad() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        try file.write([1, 2, 3], at: 0)
        fileSystem.crash(.keepAll)
        #expect(fileSystem.contents(of: "/db/a") == [1, 2, 3])
    }

    @Test func aNewNameIsDurableOnlyAfterTheDirectoryIsSynced() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        try file.write([7], at: 0)
        try file.sync()
        fileSystem.crash(.dropAll)
        #expect(fileSystem.contents(of: "/db/a") == nil)

        let again = try fileSystem.open("/db/a", options: [.create, .write])
        try again.write([7], at: 0)
        try again.sync()
        try fileSystem.syncDirectory("/db")
        try fileSystem.rename("/db/a", to: "/db/b")
        fileSystem.crash(.dropAll)
        #expect(fileSystem.contents(of: "/db/a") == [7])
        #expect(fileSystem.contents(of: "/db/b") == nil)
    }

    @Test func randomFatesKeepDropOrTearEachUnsyncedWrite() throws {
        var outcomes = Set<[UInt8]>()
        for seed in UInt64(0)..<64 {
            let fileSystem = SimulatedFileSystem()
            let file = try makeFile(fileSystem)
            try file.write([UInt8](repeating: 0, count: 1024), at: 0)
            try file.syncData()
            try fileSystem.syncDirectory("/db")
            try file.write([UInt8](repeating: 0xAA, count: 1024), at: 0)
            fileSystem.crash(.random(seed: seed))
            let image = try #require(fileSystem.contents(of: "/db/a"))
            #expect(image.count == 1024)
            #expect(image.allSatisfy { $0 == 0 || $0 == 0xAA })
            outcomes.insert(image)
        }
        // Kept whole, dropped, torn as a prefix, torn by sectors: at least three shapes show up.
        #expect(outcomes.contains([UInt8](repeating: 0xAA, count: 1024)))
        #expect(outcomes.contains([UInt8](repeating: 0, count: 1024)))
        #expect(outcomes.count >= 3)
    }

    @Test func theSameSeedGivesTheSameCrashState() throws {
        func run() throws -> [UInt8]? {
            let fileSystem = SimulatedFileSystem()
            let file = try makeFile(fileSystem)
            for index in 0..<20 { try file.write([UInt8](repeating: UInt8(index), count: 700), at: Int64(index * 300)) }
            fileSystem.crash(.random(seed: 42))
            return fileSystem.contents(of: "/db/a")
        }
        #expect(try run() == run())
    }

    @Test func anInjectedFaultFailsThatOperationOnceOrFromThenOn() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        let index = fileSystem.operationCount
        fileSystem.injectFault(errno: ENOSPC, atOperation: index)
        #expect(throws: FileIOError.noSpace(operation: .write, path: "/db/a")) { try file.write([1], at: 0) }
        try file.write([1], at: 0)

        fileSystem.failNext(.syncData, errno: EIO, persistent: true)
        #expect(throws: FileIOError.ioError(operation: .syncData, path: "/db/a")) { try file.syncData() }
        #expect(throws: FileIOError.ioError(operation: .syncData, path: "/db/a")) { try file.syncData() }
        try file.write([2], at: 1)
        #expect(fileSystem.contents(of: "/db/a") == [1, 2])
    }

    @Test func aFailedOperationChangesNothing() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        fileSystem.failNext(.write, errno: EIO)
        #expect(throws: FileIOError.self) { try file.write([5, 5], at: 0) }
        #expect(fileSystem.contents(of: "/db/a") == [])
    }

    @Test func cuttingPowerFreezesTheStateAndHandlesDieInTheCrash() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        try file.write([1], at: 0)
        fileSystem.cutPower(atOperation: fileSystem.operationCount)
        #expect(throws: FileIOError.self) { try file.write([2], at: 1) }
        fileSystem.crash(.keepAll)
        #expect(fileSystem.contents(of: "/db/a") == [1])
        #expect(throws: FileIOError.closed(operation: .write, path: "/db/a")) { try file.write([3], at: 0) }
    }

    @Test func operationsAreCountedByKind() throws {
        let fileSystem = SimulatedFileSystem()
        let file = try makeFile(fileSystem)
        try file.write([1], at: 0)
        try file.syncData()
        try file.syncData()
        #expect(fileSystem.count(of: .syncData) == 2)
        #expect(fileSystem.count(of: .write) == 1)
        #expect(fileSystem.count(of: .syncDirectory) == 1 && fileSystem.count(of: .createDirectory) == 1)
        #expect(fileSystem.operationCount == 6)
    }

    @Test func anExclusiveLockIsRefusedToASecondHolderUntilReleased() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/db")
        let lock = try fileSystem.lockExclusively("/db/LOCK")
        #expect(throws: FileIOError.locked(path: "/db/LOCK")) { try fileSystem.lockExclusively("/db/LOCK") }
        lock.unlock()
        _ = try fileSystem.lockExclusively("/db/LOCK")
    }
}

extension SimulatedFileSystemTests {
    /// A new directory's name lives in its parent: until the parent is synced, a power
    /// loss may take the directory and every file in it, synced or not.
    @Test func aNewDirectoryIsDurableOnlyAfterItsParentIsSynced() throws {
        let fileSystem = SimulatedFileSystem()
        /// Writes `byte` to /db/wal/a, syncs the file and its directory, then cuts the power.
        func writeSyncedThenLosePower(_ byte: UInt8) throws {
            let file = try fileSystem.open("/db/wal/a", options: [.create, .write])
            try file.write([byte], at: 0)
            try file.sync()
            try fileSystem.syncDirectory("/db/wal")
            fileSystem.crash(.dropAll)
        }
        try fileSystem.createDirectory("/db/wal")
        try writeSyncedThenLosePower(1)
        #expect(!fileSystem.fileExists("/db") && fileSystem.contents(of: "/db/wal/a") == nil)

        try fileSystem.createDirectoryDurably("/db/wal")
        try writeSyncedThenLosePower(2)
        #expect(fileSystem.contents(of: "/db/wal/a") == [2])
        #expect(parentDirectory(of: "/db/wal") == "/db" && parentDirectory(of: "/db") == "/"
                    && parentDirectory(of: "s.db") == "." && parentDirectory(of: "a/b/") == "a")
    }

    @Test func whatAProcessKillKeepsIsStillLostToALaterPowerLossUnlessSynced() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectoryDurably("/db")
        let file = try fileSystem.open("/db/a", options: [.create, .write])
        try file.write([1, 2], at: 0)
        try file.sync()
        try fileSystem.syncDirectory("/db")
        try file.write([9], at: 0)
        fileSystem.crash(.keepAll)
        #expect(fileSystem.contents(of: "/db/a") == [9, 2])
        fileSystem.crash(.dropAll)
        #expect(fileSystem.contents(of: "/db/a") == [1, 2])
    }
}
