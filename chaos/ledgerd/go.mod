module cronfleet.local/chaos/ledgerd

go 1.22
