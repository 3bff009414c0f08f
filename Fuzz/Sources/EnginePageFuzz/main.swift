// Fuzzes the B+tree page decoders through the engine's read paths: a valid data file
// whose meta page points at page 2, and the fuzzer's bytes as pages 2 and up (each page's
// ID and checksum fixed by the harness unless byte 0 is odd, so the fuzzer reaches the
// slot, cell, overflow and free-list decoding). Open, get, scan and verify must give
// results or typed errors, never a trap, a hang or a huge allocation.
import Codec
import Engine
import FileIO

let pageBytes = 4096

func littleEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }

func seal(_ page: inout [UInt8]) {
    let checksum = CRC32C.checksum(page[4...])
    page.replaceSubrange(0..<4, with: littleEndian(checksum))
}

func metaPage(generation: UInt64, root: UInt64, freeList: UInt64, height: UInt64, pageCount: UInt64) -> [UInt8] {
    var page = [UInt8](repeating: 0, count: 4) + [1, 0, 0, 0] + Array("STRATADB".utf8) + littleEndian(UInt16(1))
    page += littleEndian(UInt16(0)) + littleEndian(UInt32(pageBytes)) + littleEndian(generation) + littleEndian(root)
    page += littleEndian(freeList) + littleEndian(UInt64(0)) + littleEndian(pageCount) + littleEndian(UInt64(0))
    page += littleEndian(height)
    page += [UInt8](repeating: 0, count: pageBytes - page.count)
    seal(&page)
    return page
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard input.count >= 4 else { return 0 }
    let fixChecksums = input[0] & 1 == 0
    let height = UInt64(input[1] % 4)
    let freeList = input[2] % 8 == 0 ? UInt64(3) : 0
    var pages: [[UInt8]] = []
    var rest = input.dropFirst(3)
    while !rest.isEmpty && pages.count < 6 {
        var page = Array(rest.prefix(pageBytes))
        rest = rest.dropFirst(pageBytes)
        page += [UInt8](repeating: 0, count: pageBytes - page.count)
        if fixChecksums {
            page.replaceSubrange(8..<16, with: littleEndian(UInt64(pages.count + 2)))
            seal(&page)
        }
        pages.append(page)
    }
    let pageCount = UInt64(2 + pages.count)
    let root: UInt64 = height == 0 ? 0 : 2
    let file = metaPage(generation: 1, root: root, freeList: freeList, height: height, pageCount: pageCount)
        + [UInt8](repeating: 0, count: pageBytes) + pages.flatMap { $0 }
    let fileSystem = SimulatedFileSystem()
    do {
        try fileSystem.createDirectory("/db")
        let handle = try fileSystem.open("/db/data", options: [.create, .write])
        try handle.write(file, at: 0)
    } catch {
        fatalError("the simulated file system failed: \(error)")
    }
    // Small log segments and cache: the simulated file system holds every byte in memory.
    var options = EngineOptions()
    options.log.segmentBytes = 4096
    options.cacheBytes = 1 << 20
    guard let (engine, _) = try? StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options) else { return 0 }
    let snapshot = engine.snapshot()
    _ = try? snapshot.get(Array("k".utf8))
    _ = try? snapshot.scan(limit: 100)
    _ = try? snapshot.scan(reverse: true, limit: 100)
    _ = engine.verify()
    try? engine.close(checkpoint: false)
    return 0
}
