module cronfleet.local/loadtest/ledger

go 1.22
