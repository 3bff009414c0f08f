// The structure-aware target: a valid store (keys in its data file and in its log) whose
// header fields the input sets, each checksum resealed (ForgedStore.swift), so the fuzzer
// spends its time on values the decoders must range-check rather than on checksums.
import StrataEngine
import StrataFileIO
import StrataWAL

extension FuzzTargets {
    /// The store every `storeFields` input starts from: 300 keys in the data file, 40 in
    /// the log after the checkpoint, on a simulated file system, as an image.
    static let storeFieldsImage: StoreImage = {
        let fileSystem = SimulatedFileSystem()
        do {
            let (engine, _) = try StorageEngine.open(path: "/s", fileSystem: fileSystem, options: smallStoreOptions)
            for index in 0..<340 {
                try engine.commit(WALBatch([.put(key: Array("key\(index)".utf8), value: Array("value\(index)".utf8))]))
                if index == 299 { try engine.checkpoint() }
            }
            try engine.close(checkpoint: false)
            var files: [String: [UInt8]] = [:]
            for path in ["data"] + (try fileSystem.contentsOfDirectory("/s/wal").filter { $0.hasSuffix(".seg") }.map { "wal/" + $0 }) {
                let file = try fileSystem.open("/s/" + path, options: [])
                files[path] = try file.read(count: Int(try file.size()), at: 0)
                try file.close()
            }
            return StoreImage(files: files)
        } catch {
            preconditionFailure("setting up the store failed: \(error)")
        }
    }()

    private static var smallStoreOptions: EngineOptions {
        var options = EngineOptions()
        options.log.segmentBytes = 64 << 10
        options.cacheBytes = 1 << 20
        return options
    }

    /// Steps of two bytes: a field (`ForgedStore.fields`, modulo their count) and a value:
    /// one of the field's extremes (`ForgedStore.extremes`, modulo their count) below 0xF0,
    /// else the next 8 bytes of the input (little-endian, cut to the field's width). The
    /// forged store must open or be refused with a typed error; one that opens reads every
    /// key, verifies, takes a commit and closes, each giving a result or a typed error.
    public static func storeFields(_ input: [UInt8]) {
        var image = storeFieldsImage
        var rest = input[...]
        while rest.count >= 2 {
            let field = ForgedStore.fields[Int(rest[rest.startIndex]) % ForgedStore.fields.count]
            let selector = rest[rest.startIndex + 1]
            rest = rest.dropFirst(2)
            let value: UInt64
            if selector < 0xF0 {
                let extremes = ForgedStore.extremes(width: field.width)
                value = extremes[Int(selector) % extremes.count]
            } else {
                value = rest.prefix(8).reversed().reduce(0) { $0 << 8 | UInt64($1) }
                rest = rest.dropFirst(8)
            }
            ForgedStore.write(value, into: field, of: &image)
        }
        let fileSystem = SimulatedFileSystem()
        do {
            try fileSystem.createDirectory("/s/wal")
            for (path, bytes) in image.files {
                let file = try fileSystem.open("/s/" + path, options: [.create, .write])
                try file.write(bytes, at: 0)
                try file.close()
            }
        } catch {
            preconditionFailure("the simulated file system failed: \(error)")
        }
        let engine: StorageEngine
        do { engine = try StorageEngine.open(path: "/s", fileSystem: fileSystem, options: smallStoreOptions).engine } catch {
            precondition(error is EngineError, "opening threw an untyped error: \(error)")
            return
        }
        do { _ = try engine.snapshot().scan() } catch {
            precondition(error is EngineError, "a scan threw an untyped error: \(error)")
        }
        _ = engine.verify()
        do { _ = try engine.commit(WALBatch([.put(key: [1], value: [2])])) } catch {
            precondition(error is EngineError, "a commit threw an untyped error: \(error)")
        }
        do { try engine.close() } catch {
            precondition(error is EngineError, "closing threw an untyped error: \(error)")
        }
    }
}
