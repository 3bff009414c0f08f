import Foundation
import StrataFileIO
import Synchronization
import Testing
@testable import StrataEngine

/// A file that counts the writebacks it is asked to start and passes everything else on.
private final class WritebackCountingFile: OpenFile {
    let base: any OpenFile
    let starts = Mutex(0)

    init(_ base: any OpenFile) { self.base = base }

    var path: String { base.path }
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int { try base.read(into: buffer, at: offset) }
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws { try base.write(bytes, at: offset) }
    func append(_ bytes: UnsafeRawBufferPointer) throws -> Int64 { try base.append(bytes) }
    func size() throws -> Int64 { try base.size() }
    func syncData() throws { try base.syncData() }
    func sync() throws { try base.sync() }
    func truncate(to size: Int64) throws { try base.truncate(to: size) }
    func allocate(offset: Int64, length: Int64) throws { try base.allocate(offset: offset, length: length) }
    func close() throws { try base.close() }
    func startWriteback() { starts.withLock { $0 += 1 } }
}

/// Pages written in bulk (a checkpoint's) start the device's writeback every
/// `PageFile.writebackBytes`, so the final fdatasync, and the log syncs queued behind it,
/// stay short; a sync starts the count again.
@Suite struct PageFileWritebackTests {
    @Test func writebackStartsEveryWritebackBytesOfPages() throws {
        let fileSystem = SimulatedFileSystem()
        try fileSystem.createDirectory("/t")
        let file = WritebackCountingFile(try fileSystem.open("/t/data", options: [.create, .write]))
        let pageFile = try PageFile(path: "/t/data", file: file, pageBytes: 4096, cachePages: 8)
        let perWriteback = PageFile.writebackBytes / 4096
        func writePages(_ ids: Range<Int>) throws {
            for id in ids {
                let page = PageCodec.encodeLeaf([], id: PageID(UInt64(id)), generation: 1, pageBytes: 4096)
                try pageFile.write(page, at: PageID(UInt64(id)))
            }
        }
        try writePages(2..<(2 + 3 * perWriteback - 1))
        #expect(file.starts.withLock { $0 } == 2)
        try writePages((2 + 3 * perWriteback - 1)..<(2 + 3 * perWriteback))
        #expect(file.starts.withLock { $0 } == 3)
        // After a sync nothing is pending: the next writeback waits for a full amount again.
        try writePages(1_000..<1_010)
        try pageFile.syncData()
        try writePages(2_000..<(2_000 + perWriteback - 1))
        #expect(file.starts.withLock { $0 } == 3)
    }

    /// On the real file system the hint is accepted for a file open for writing and
    /// ignored for a closed one (it never throws: a failed writeback surfaces at the sync).
    @Test func thePOSIXHintRunsAndTheSyncStillWorks() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-writeback-\(UUID())").path
        let fileSystem = POSIXFileSystem()
        try fileSystem.createDirectory(directory)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = try fileSystem.open(directory + "/f", options: [.create, .write])
        try file.write([UInt8](repeating: 7, count: 1 << 16), at: 0)
        file.startWriteback()
        try file.syncData()
        try file.close()
        file.startWriteback()
        #expect(try fileSystem.open(directory + "/f", options: []).size() == 1 << 16)
    }
}
