import StrataFileIO
import Foundation
import Testing

@Suite struct POSIXFileSystemTests {
    private func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "strata-fileio-\(UUID().uuidString)"
        try POSIXFileSystem().createDirectory(path)
        return path
    }

    @Test func writesReadsSyncsAndAllocates() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fileSystem = POSIXFileSystem()
        let file = try fileSystem.open(directory + "/f", options: [.create, .write])
        try file.allocate(offset: 0, length: 8192)
        #expect(try file.size() == 8192)
        try file.write(Array("hello".utf8), at: 4096)
        try file.syncData()
        #expect(try file.read(count: 5, at: 4096) == Array("hello".utf8))
        #expect(try file.read(count: 100, at: 8190).count == 2)
        #expect(try file.append([1, 2, 3]) == 8192)
        try file.truncate(to: 10)
        try file.sync()
        #expect(try file.size() == 10)
        try fileSystem.syncDirectory(directory)
        #expect(try fileSystem.contentsOfDirectory(directory) == ["f"])
        try file.close()
        #expect(throws: FileIOError.closed(operation: .read, path: directory + "/f")) { try file.read(count: 1, at: 0) }
    }

    @Test func errnoBecomesATypedErrorNamingThePath() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fileSystem = POSIXFileSystem()
        #expect(throws: FileIOError.notFound(operation: .open, path: directory + "/missing")) {
            try fileSystem.open(directory + "/missing", options: [])
        }
        _ = try fileSystem.open(directory + "/x", options: [.create, .write])
        #expect(throws: FileIOError.alreadyExists(operation: .open, path: directory + "/x")) {
            try fileSystem.open(directory + "/x", options: [.create, .exclusive])
        }
        #expect(throws: FileIOError.notFound(operation: .rename, path: directory + "/nope")) {
            try fileSystem.rename(directory + "/nope", to: directory + "/y")
        }
        // A lock file that cannot be opened is a failed open (a permission problem reads
        // as one), not a failed flock, which would suggest another holder.
        #expect(throws: FileIOError.notFound(operation: .open, path: directory + "/no/LOCK")) {
            try fileSystem.lockExclusively(directory + "/no/LOCK")
        }
        #expect(throws: FileIOError.notFound(operation: .open, path: directory + "/no/data")) {
            try fileSystem.lockShared(directory + "/no/data")
        }
    }

    /// A mapping grows in place inside the span it reserved: bytes mapped before stay at
    /// their addresses, bytes written since are read through the same base, and a growth
    /// past the span is refused.
    @Test func aMappingGrowsInPlaceWithinItsReservedSpan() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = try POSIXFileSystem().open(directory + "/f", options: [.create, .write])
        defer { try? file.close() }
        try file.write([UInt8](repeating: 7, count: 8192), at: 0)
        let mapping = try #require(try file.mapReadOnly(length: 8192, reserving: 1 << 20))
        #expect(mapping.length == 8192 && mapping.reservedLength == 1 << 20)
        let base = mapping.base
        try file.write([UInt8](repeating: 9, count: 3 * 4096), at: 8192)
        #expect(file.growMapping(mapping, to: 5 * 4096))
        #expect(mapping.base == base && mapping.length == 5 * 4096)
        #expect(base.load(fromByteOffset: 100, as: UInt8.self) == 7)
        #expect(base.load(fromByteOffset: 4 * 4096 + 5, as: UInt8.self) == 9)
        #expect(!file.growMapping(mapping, to: 2 << 20))
        #expect(mapping.length == 5 * 4096)
    }

    @Test func aSecondLockInTheSameProcessIsRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fileSystem = POSIXFileSystem()
        let lock = try fileSystem.lockExclusively(directory + "/LOCK")
        #expect(throws: FileIOError.locked(path: directory + "/LOCK")) { try fileSystem.lockExclusively(directory + "/LOCK") }
        lock.unlock()
        let again = try fileSystem.lockExclusively(directory + "/LOCK")
        again.unlock()
    }
}
