#include "tandem/sha256.h"

#include <gtest/gtest.h>

// Oracle: the FIPS 180-2 test vectors.
TEST(Sha256, KnownVectors) {
    EXPECT_EQ(tandem::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(tandem::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    tandem::Sha256 h;
    h.update("ab", 2);
    h.update("c", 1);
    EXPECT_EQ(h.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
