-- storectl: changes Item.body
ALTER TABLE ZITEM DROP COLUMN ZBODY;
