module tandem/sdk

go 1.19
