// Fuzzes LZ4 block decoding with any bytes and any declared size (bounded as the WAL
// reader bounds it), and checks that compression round-trips.
//
// Input: bytes 0–3 little-endian are the declared decompressed size (taken modulo 1 MiB,
// plus 1); the rest is the block.
import Codec

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard input.count >= 4 else { return 0 }
    let declared = input.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self))) } % (1 << 20) + 1
    let block = Array(input.dropFirst(4))
    if let output = try? LZ4Block.decompress(block, decompressedCount: declared) {
        precondition(output.count == declared, "decompressed to the wrong size")
    }
    if let compressed = LZ4Block.compress(block) {
        precondition(compressed.count < block.count, "compression reported a block that is not smaller")
        let restored = try? LZ4Block.decompress(compressed, decompressedCount: block.count)
        precondition(restored == block, "LZ4 round trip lost data")
    }
    return 0
}
