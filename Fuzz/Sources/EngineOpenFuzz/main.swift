// Fuzzes opening a store from arbitrary bytes: the input is split into a data file and a
// write-ahead-log segment on the simulated file system (bytes 0–3, little-endian, give
// the data file's length; the rest of the input after it is the segment). Opening must
// succeed or fail with a typed error; a store that opens must read, verify, take a commit
// and close without trapping.
import Engine
import FileIO
import WAL

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard input.count >= 4 else { return 0 }
    let body = Array(input.dropFirst(4))
    let declared = input.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self))) }
    let split = min(declared, body.count)
    let fileSystem = SimulatedFileSystem()
    do {
        try fileSystem.createDirectory("/db/wal")
        let dataFile = try fileSystem.open("/db/data", options: [.create, .write])
        try dataFile.write(Array(body[..<split]), at: 0)
        let segment = try fileSystem.open("/db/wal/wal-0000000000000001.seg", options: [.create, .write])
        try segment.write(Array(body[split...]), at: 0)
    } catch {
        fatalError("the simulated file system failed: \(error)")
    }
    // Small log segments and cache: the simulated file system holds every byte in memory.
    var options = EngineOptions()
    options.log.segmentBytes = 4096
    options.cacheBytes = 1 << 20
    guard let (engine, _) = try? StorageEngine.open(path: "/db", fileSystem: fileSystem, options: options) else { return 0 }
    _ = try? engine.snapshot().scan(limit: 50)
    _ = engine.verify()
    _ = try? engine.commit(WALBatch([.put(key: [1], value: [2])]))
    try? engine.close()
    return 0
}
